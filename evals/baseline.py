"""The summary-only baseline: a rolling summary that sees only the turns, as most agent frameworks keep one.

Pure functions over plain data. Offline and deterministic, and extractive like the desk's default
summarizer, but it is never shown the pinned state: each compaction folds the replaced turns (the
first sentence of each customer and agent turn, each tool call with its arguments, the first words
of each tool result) into the previous rolling summary, and keeps the newest part that fits in the
same room the desk spends on its pinned state and summary at that compaction. The request it
leaves is the system prompt, that summary and the kept turns: no pinned state.

The eval replays the desk's own compactions (same cuts, same kept turns) with this summary in place
of the desk's, so the only difference between the two columns is the pinned state.
"""

from __future__ import annotations

import json
import re
from typing import Any

from core.context import SUMMARY_PREFIX, summary_message
from core.tokens import STATE_PREFIX
from core.vocabulary import TurnRole

SENTENCE = re.compile(r"(.+?[.!?])(\s|$)", re.S)
RESULT_CHARS = 120
SENTENCE_CHARS = 200
ARGS_CHARS = 200


def first_sentence(text: str, limit: int = SENTENCE_CHARS) -> str:
    text = " ".join(text.split())
    match = SENTENCE.match(text)
    sentence = match.group(1) if match else text
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


def turn_line(turn: dict[str, Any]) -> str:
    """One replaced turn as the baseline keeps it. `turn` has role, content, tool, args, number."""
    role = turn.get("role", "")
    number = turn.get("number")
    content = str(turn.get("content") or "")
    if role == TurnRole.CUSTOMER:
        return f"Customer (turn {number}): {first_sentence(content)}"
    if role == TurnRole.AGENT:
        return f"Agent (turn {number}): {first_sentence(content)}"
    if role == TurnRole.TOOL_CALL:
        args = json.dumps(turn.get("args") or {}, sort_keys=True, ensure_ascii=False)
        if len(args) > ARGS_CHARS:
            args = args[: ARGS_CHARS - 1] + "…"
        return f"Agent called {turn.get('tool') or 'a tool'}({args}) (turn {number})."
    if role == TurnRole.TOOL_RESULT:
        shown = " ".join(content.split())[:RESULT_CHARS] or "(empty)"
        return f"{turn.get('tool') or 'The tool'} returned: {shown}"
    return ""


def rolling_summary(previous: str, turns: list[dict[str, Any]], *, room_chars: int) -> str:
    """The previous summary and the replaced turns, the newest part that fits in `room_chars`."""
    lines = [line for line in (turn_line(t) for t in turns) if line]
    text = " ".join([previous, *lines]).strip() if previous else " ".join(lines)
    if len(text) > room_chars:
        text = "…" + text[-(max(room_chars, 2) - 1) :]
    return text


def baseline_summary(text: str) -> dict[str, Any]:
    """The baseline's summary as the request carries it: prose only, no structured fields."""
    return {"narrative": text}


def baseline_messages(messages: list[dict[str, Any]], text: str | None) -> list[dict[str, Any]]:
    """The desk's request with the pinned state removed and its summary replaced by the baseline's."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = str(message.get("content") or "")
        if message.get("role") == "system" and content.startswith(STATE_PREFIX):
            continue
        if message.get("role") == "system" and content.startswith(SUMMARY_PREFIX):
            if text is not None:
                out.append({"role": "system", "content": summary_message(baseline_summary(text))})
            continue
        out.append(message)
    return out
