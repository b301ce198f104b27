"""What every framework adapter says the same way: the pinned state and the summary as the model reads
them, and the refusal a guarded tool returns. No framework is imported here."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sundry_desk_client.errors import DeskError, RepeatRefused
from sundry_desk_client.models import Context, ContextTurn


def state_text(context: Context) -> str:
    state = json.dumps(context.pinned_state.agent_json(), separators=(",", ":"), ensure_ascii=False)
    return (
        "Pinned ticket state (from the desk; authoritative: read refunded_cents_total and actions_taken "
        f"before any refund):\n{state}"
    )


def summary_text(context: Context) -> str | None:
    if context.summary is None:
        return None
    # The desk folds the previous summary into each new one, so it stands for every turn up to the cut.
    covers = context.summary_covers_turns
    span = f" of turns 1-{covers[-1]}" if covers else ""
    summary = json.dumps(context.summary.model_dump(mode="json"), ensure_ascii=False)
    return f"Summary{span} (the desk compacted them; the turns after it follow verbatim):\n{summary}"


def is_reasoning(turn: ContextTurn) -> bool:
    return isinstance(turn.args, dict) and turn.args.get("sdk_item") == "reasoning"


def json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def stable_key(prefix: str, *parts: object) -> str:
    """An Idempotency-Key derived from what identifies one post (a ticket and a message id), so posting the
    same message again (a re-run graph step, a retried tool) is answered from the desk's record."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:40]
    return f"{prefix}-{digest}"


def refusal_text(exc: RepeatRefused, tool: str) -> str:
    earlier = exc.earlier_action
    return json.dumps(
        {
            "refused": True,
            "error": exc.code or "repeat_refused",
            "message": exc.message,
            "earlier_action": earlier,
            "refunded_cents_total": exc.refunded_cents_total,
            "note": (
                f"{tool} did NOT run. The desk already records {earlier.get('tool', tool)} "
                f"{earlier.get('id', '')} for {earlier.get('item', 'this item')} "
                f"({earlier.get('amount_cents', '?')} cents at turn {earlier.get('at_turn', '?')}). "
                "Tell the customer what was already done; do not try again."
            ),
        },
        ensure_ascii=False,
    )


def not_reserved_text(exc: DeskError, tool: str) -> str:
    return json.dumps(
        {
            "refused": False,
            "error": exc.code or type(exc).__name__,
            "status": exc.status,
            "message": exc.message,
            "note": f"{tool} did NOT run: the desk could not reserve it ({exc}).",
        },
        ensure_ascii=False,
    )
