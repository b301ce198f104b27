"""The compaction policy as pure functions: is it due, is this a safe moment, where does the cut go."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TOOL_ROLES = {"tool_call", "tool_result"}


@dataclass(frozen=True)
class TurnInfo:
    number: int
    role: str
    tokens: int
    boundary: str = ""
    tool_call_id: str = ""


def is_due(total_tokens: int, threshold_tokens: int) -> bool:
    """Due when the assembled request exceeds the threshold. Turn counts play no part."""
    return total_tokens > threshold_tokens


def _call_key(turn: TurnInfo) -> str:
    return turn.tool_call_id or f"#{turn.number}"


def waiting_on_tool(turns: Sequence[TurnInfo]) -> bool:
    """True when a tool call or tool result still waits for the reasoning that consumes it.

    A tool call waits for its result; a result waits for the next agent turn. A call whose result
    never came is still waiting, whatever was said after it.
    """
    unanswered: set[str] = set()
    unconsumed = False
    for turn in turns:
        if turn.role == "tool_call":
            unanswered.add(_call_key(turn))
            unconsumed = True
        elif turn.role == "tool_result":
            unanswered.discard(_call_key(turn))
            unconsumed = True
        elif turn.role == "agent":
            unconsumed = False
    return unconsumed or bool(unanswered)


def at_boundary(turns: Sequence[TurnInfo]) -> bool:
    """The newest turn completes a resolution step and nothing waits on a tool."""
    if not turns:
        return False
    newest = turns[-1]
    return bool(newest.boundary) and newest.role not in TOOL_ROLES and not waiting_on_tool(turns)


def choose_cut(turns: Sequence[TurnInfo], keep_recent_tokens: int) -> int:
    """How many of `turns` (the active window, oldest first) to replace.

    Keeps a verbatim tail of at most `keep_recent_tokens`, then moves the cut later until no kept
    tool result belongs to a replaced tool call and no replaced tool call is the last replaced turn
    with its result kept. Returns 0 when nothing can be replaced.
    """
    n = len(turns)
    cut = n
    tail = 0
    for index in range(n - 1, -1, -1):
        if tail + turns[index].tokens > keep_recent_tokens:
            break
        tail += turns[index].tokens
        cut = index
    while True:
        replaced_calls = {_call_key(t) for t in turns[:cut] if t.role == "tool_call"}
        moved = cut
        for index in range(cut, n):
            turn = turns[index]
            if turn.role == "tool_result" and _call_key(turn) in replaced_calls:
                moved = index + 1
        if moved == cut:
            return cut
        cut = moved
