"""What the desk tells people when something needs a look, and when it tries again.

The event kinds a notification channel subscribes to, the retry schedule (exponential back-off, capped),
and the message a channel sends: a Slack-compatible body (`text` and `blocks`) with a machine-readable
`event` object beside them. Pure: no settings, no database, no network.
"""

from __future__ import annotations

import json
from typing import Any

from core.vocabulary import Term

ERROR_CHARS = 500


class NotifyEvent(Term):
    COVERAGE_MISS = "coverage_miss", "Coverage miss"
    REFUSED_REPEAT = "refused_repeat", "Refused repeat"
    FORCED_COMPACTION = "forced_compaction", "Forced compaction"
    OVER_BUDGET_COMPACTION = "over_budget_compaction", "Over-budget compaction"
    FAILED_COMPACTION = "failed_compaction", "Failed compaction"
    INTENT_PAST_LIMIT = "intent_past_limit", "Open intent past its limit"


class ChannelKind(Term):
    WEBHOOK = "webhook", "Webhook"
    EMAIL = "email", "Email"


class NotificationStatus(Term):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (no attempts left)"


def backoff_seconds(attempt: int, *, base: float, cap: float) -> float:
    """The wait after failed attempt `attempt` (1, 2, ...): base, 2 x base, 4 x base ..., never above cap."""
    if attempt < 1:
        raise ValueError("attempts are numbered from 1")
    return float(min(cap, base * 2 ** min(attempt - 1, 32)))


def truncate(text: str, limit: int = ERROR_CHARS) -> str:
    """At most `limit` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def headline(kind: str, ticket_id: str, detail: str) -> str:
    """The one-line text: what happened, on which ticket, and why (the detail)."""
    label = NotifyEvent(kind).label
    return f"{label} on {ticket_id}: {detail}" if detail else f"{label} on {ticket_id}"


def message_body(*, text: str, event: dict[str, Any], link: str = "") -> dict[str, Any]:
    """The webhook's JSON: Slack's `text` and `blocks` (a section, and a context line with the ticket's
    link and the event id), and the `event` object for machines."""
    context = [f"event `{event.get('id', '')}`", f"kind `{event.get('kind', '')}`"]
    if link:
        context.insert(0, f"<{link}|open the ticket>")
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]},
        ],
        "event": event,
    }


def encode(body: dict[str, Any]) -> bytes:
    """The bytes signed and sent: compact, sorted keys, UTF-8 (non-ASCII kept as is)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
