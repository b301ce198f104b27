"""Context assembly as pure functions over plain data.

The assembled request for the next model call is: the system prompt, the pinned state (compact
JSON), the active summary, and every turn after the last applied compaction. Its size is a sum of
stored counts: nothing stored is tokenized again here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from core.state_text import dumps
from core.tokens import REPLY_PRIMING_TOKENS, RequestSize, compact_json, state_message, turn_text

SUMMARY_PREFIX = "Summary of earlier turns (replaced by compaction):\n"


def summary_message(summary: dict[str, Any]) -> str:
    return SUMMARY_PREFIX + compact_json(summary)


class TurnView(NamedTuple):
    """A turn as the context shows it. A tuple, not a dataclass: one is made for every turn of every context
    read, and a frozen dataclass's __init__ cost 1.7 us a turn against 0.2."""

    number: int
    role: str
    content: str
    tool: str
    args: Any
    tool_call_id: str
    boundary: str
    tokens: int

    def as_json(self) -> dict[str, Any]:
        number, role, content, tool, args, tool_call_id, boundary, tokens = self
        return {
            "number": number,
            "role": role,
            "content": content,
            "tool": tool,
            "args": args,
            "tool_call_id": tool_call_id,
            "boundary": boundary,
            "tokens": tokens,
        }


@dataclass(frozen=True)
class TokenBreakdown:
    system: int
    state: int
    summary: int
    turns: int

    @property
    def total(self) -> int:
        return RequestSize(system=self.system, state=self.state, summary=self.summary, turns=self.turns).total

    def as_json(self) -> dict[str, int]:
        return {
            "system": self.system,
            "state": self.state,
            "summary": self.summary,
            "turns": self.turns,
            "framing": REPLY_PRIMING_TOKENS,
            "total": self.total,
        }


@dataclass(frozen=True)
class AssembledContext:
    system_prompt: str
    # The pinned state as the model reads it: the document, or the text it is stored and served as
    # (core.state_text), parsed only when something asks for `pinned_state`.
    state: dict[str, Any] | str
    summary: dict[str, Any] | None
    summary_covers: tuple[int, int] | None
    turns: list[TurnView]
    tokens: TokenBreakdown
    token_budget: int
    threshold_tokens: int
    # A compaction claimed and not finished yet (a worker will run it): number, since, running, upto_turn.
    pending_compaction: dict[str, Any] | None = None

    @cached_property
    def pinned_state(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.state) if isinstance(self.state, str) else self.state
        return parsed

    def messages(self) -> list[dict[str, Any]]:
        """The request exactly as it would be sent: one dict per message."""
        out: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "system", "content": state_message(self.pinned_state)},
        ]
        if self.summary is not None:
            out.append({"role": "system", "content": summary_message(self.summary)})
        for turn in self.turns:
            message = {
                "role": turn.role,
                "content": turn_text(
                    role=turn.role,
                    content=turn.content,
                    tool=turn.tool,
                    args=turn.args,
                    tool_call_id=turn.tool_call_id,
                ),
                "turn": turn.number,
            }
            if turn.tool:
                message["tool"] = turn.tool
            if turn.tool_call_id:
                message["tool_call_id"] = turn.tool_call_id
            out.append(message)
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "system_prompt": self.system_prompt,
            "pinned_state": self.pinned_state,
            **self._after_state(),
        }

    def as_json_text(self) -> str:
        """`as_json()` as the API renders it, with the state's stored text put in as it is (not parsed)."""
        state = self.state if isinstance(self.state, str) else dumps(self.state)
        after = dumps(self._after_state())[1:]
        return f'{{"system_prompt":{dumps(self.system_prompt)},"pinned_state":{state},{after}'

    def _after_state(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "summary_covers_turns": list(self.summary_covers) if self.summary_covers else None,
            "turns": [t.as_json() for t in self.turns],
            "tokens": self.tokens.as_json(),
            "token_budget": self.token_budget,
            "threshold_tokens": self.threshold_tokens,
            "compaction_pending": self.pending_compaction,
        }
