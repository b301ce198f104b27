"""The compaction policy as pure functions: is it due, is this a safe moment, where does the cut go.

Everything here works on `TurnInfo` sequences (the active window, oldest first) and never looks at
content: an empty tool result is a turn like any other.

Pairing (which call a tool result answers), scanning the window in order:

1. A result with a `tool_call_id` answers the oldest unanswered call with that id (an open one before
   one a customer turn released, see below). An id reused after its first call was answered
   therefore starts a new pair.
2. Otherwise (no id, or an id that matches no unanswered call) it answers the oldest open call of the
   tool it names (names compare case-insensitively, `-`, `_` and spaces being one separator), or the
   oldest open call of any tool when none of that tool is open or the result names no tool.
3. A result that answers nothing is an orphan: it pairs with nothing and never constrains a cut.

Waiting: a tool call waits for its result; a tool result waits for the reasoning that consumes it (a
later tool call or agent turn: the model has seen it). A call whose result never came keeps waiting
after an agent reply, but a later customer turn releases it: the runtime has moved on. A released
call no longer waits and no longer takes a result by position (rule 2); only a result naming its id
can still answer it, so one lost result cannot shift every later pairing by one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.identity import normalize_name
from core.vocabulary import TOOL_ROLES, TurnRole


@dataclass(frozen=True)
class TurnInfo:
    number: int
    role: str
    tokens: int
    boundary: str = ""
    tool_call_id: str = ""
    tool: str = ""


# Before the summarizer answers, the cut is chosen against an estimate of the summary's size (at least this,
# and at least the size of the summary it replaces).
SUMMARY_ESTIMATE_TOKENS = 300


@dataclass(frozen=True)
class CutPlan:
    """Where to cut the window, and what that cut achieves."""

    cut: int  # turns to replace (0 = nothing safe)
    forced: bool  # True when made under the hard ceiling (no boundary)
    fits: bool  # True when the request after the cut is estimated under the threshold
    # Expected tokens freed: the replaced turns, plus the summary replaced, minus the new summary's estimate.
    freed: int = field(default=0, compare=False)
    # The freed tokens reach the minimum gain asked (always true under the hard ceiling, which asks none).
    pays: bool = field(default=True, compare=False)


def min_gain_tokens(token_budget: int, share: float) -> int:
    """The fewest tokens a compaction must free to be worth a summarizer call: a share of the budget."""
    return max(0, math.ceil(token_budget * share))


def summary_estimate(current_summary_tokens: int) -> int:
    """The size the new summary is planned at when choosing the cut: the fixed estimate, or the summary it
    replaces if larger (a cut chosen against a generous estimate still fits when the summary comes)."""
    return max(SUMMARY_ESTIMATE_TOKENS, current_summary_tokens)


def expected_summary_tokens(replaced_tokens: int, current_summary_tokens: int = 0) -> int:
    """The size the new summary is expected at when judging the gain: a summary of a short stretch at most half
    of it, of a long one `SUMMARY_ESTIMATE_TOKENS`; never smaller than the summary it carries forward."""
    return max(current_summary_tokens, min(SUMMARY_ESTIMATE_TOKENS, math.ceil(replaced_tokens / 2)))


@dataclass(frozen=True)
class Room:
    """What the threshold leaves a compaction once the parts it never replaces are counted.

    `floor` is the system prompt, the pinned state and the reply priming. A compaction made as soon as the
    request is due (just over the threshold) replaces at most the `threshold - floor` tokens above the floor
    and puts a summary in their place, so it frees at most `best_gain`. When that is less than the minimum
    gain, the pinned state itself leaves too little room (`crowded`): no compaction at the threshold pays,
    and the request has to run over the threshold (towards the budget, where the hard ceiling still forces a
    compaction) before one does. With the state at or over the threshold, `state_over_threshold`.
    """

    floor: int
    threshold: int
    min_gain: int

    @property
    def turns_room(self) -> int:
        """The tokens the threshold leaves above the floor, for the summary and the turns."""
        return self.threshold - self.floor

    @property
    def best_gain(self) -> int:
        """The most a compaction at the threshold frees: everything above the floor, less its summary."""
        return self.turns_room - expected_summary_tokens(self.turns_room)

    @property
    def state_over_threshold(self) -> bool:
        """The floor alone reaches the threshold (`RequestSize.fills_threshold`)."""
        return self.floor >= self.threshold

    @property
    def crowded(self) -> bool:
        """The state leaves less room under the threshold than one compaction must free (and does not fill
        the threshold itself: that is `state_over_threshold`)."""
        return not self.state_over_threshold and self.best_gain < self.min_gain


@dataclass
class _Call:
    index: int
    call_id: str
    tool: str
    released: bool = False


@dataclass
class _Scan:
    pairs: dict[int, int] = field(default_factory=dict)  # result index -> call index
    unanswered: list[_Call] = field(default_factory=list)  # oldest first
    unconsumed: list[int] = field(default_factory=list)  # result indices, oldest first

    @property
    def waiting(self) -> list[int]:
        """Indices of the turns that still wait: open calls and unconsumed results."""
        return sorted([c.index for c in self.unanswered if not c.released] + self.unconsumed)


def _answered_call(unanswered: list[_Call], result: TurnInfo) -> _Call | None:
    if result.tool_call_id:
        same_id = [c for c in unanswered if c.call_id == result.tool_call_id]
        if same_id:
            return next((c for c in same_id if not c.released), same_id[0])
    open_calls = [c for c in unanswered if not c.released]
    if not open_calls:
        return None
    name = normalize_name(result.tool)
    if name:
        for call in open_calls:
            if call.tool == name:
                return call
    return open_calls[0]


def _scan(turns: Sequence[TurnInfo]) -> _Scan:
    scan = _Scan()
    for index, turn in enumerate(turns):
        if turn.role == TurnRole.TOOL_CALL:
            scan.unconsumed.clear()
            scan.unanswered.append(
                _Call(index=index, call_id=turn.tool_call_id, tool=normalize_name(turn.tool))
            )
        elif turn.role == TurnRole.TOOL_RESULT:
            call = _answered_call(scan.unanswered, turn)
            if call is not None:
                scan.unanswered.remove(call)
                scan.pairs[index] = call.index
            scan.unconsumed.append(index)
        elif turn.role == TurnRole.AGENT:
            scan.unconsumed.clear()
        elif turn.role == TurnRole.CUSTOMER:
            for call in scan.unanswered:
                call.released = True
    return scan


def _tails(turns: Sequence[TurnInfo]) -> list[int]:
    """tails[c] is the token count of turns[c:], for c in 0..len(turns)."""
    tails = [0] * (len(turns) + 1)
    for index in range(len(turns) - 1, -1, -1):
        tails[index] = tails[index + 1] + turns[index].tokens
    return tails


def is_due(total_tokens: int, threshold_tokens: int) -> bool:
    """Due when the assembled request exceeds the threshold. Turn counts play no part."""
    return total_tokens > threshold_tokens


def pair_results(turns: Sequence[TurnInfo]) -> dict[int, int]:
    """Result turn number -> number of the call it answers (see the module docstring). Orphans are absent."""
    pairs = _scan(turns).pairs
    return {turns[r].number: turns[c].number for r, c in pairs.items()}


def waiting_on_tool(turns: Sequence[TurnInfo]) -> bool:
    """True when a tool call or tool result still waits.

    A call waits for its result and a result waits for the next tool call or agent turn, which
    consumes it. A call whose result never came keeps waiting after an agent reply; a later customer
    turn releases it (the runtime has moved on without it).
    """
    return bool(_scan(turns).waiting)


def at_boundary(turns: Sequence[TurnInfo]) -> bool:
    """The newest turn completes a resolution step, is not a tool turn, and nothing waits on a tool."""
    if not turns:
        return False
    newest = turns[-1]
    return bool(newest.boundary) and newest.role not in TOOL_ROLES and not waiting_on_tool(turns)


def safe_cuts(turns: Sequence[TurnInfo]) -> list[int]:
    """Every c in 1..len(turns), ascending, where replacing turns[:c] leaves each pair wholly on one side.

    len(turns) is always safe (everything replaced). Orphan results constrain nothing.
    """
    n = len(turns)
    # A pair (call i, result j) forbids every cut c with i < c <= j.
    blocked = [0] * (n + 2)
    for result, call in _scan(turns).pairs.items():
        blocked[call + 1] += 1
        blocked[result + 1] -= 1
    cuts = []
    depth = 0
    for c in range(1, n + 1):
        depth += blocked[c]
        if depth == 0:
            cuts.append(c)
    return cuts


def choose_cut(turns: Sequence[TurnInfo], keep_recent_tokens: int) -> int:
    """How many of `turns` (the active window, oldest first) to replace.

    The smallest safe cut whose kept tail is at most `keep_recent_tokens`. Returns 0 when the whole
    window already fits in that tail (nothing needs replacing) or the window is empty.
    """
    tails = _tails(turns)
    wanted = next((c for c, tail in enumerate(tails) if tail <= keep_recent_tokens), len(turns))
    if wanted == 0:
        return 0
    return next(c for c in safe_cuts(turns) if c >= wanted)


def complete_prefix(turns: Sequence[TurnInfo]) -> int:
    """How many turns come before the newest unfinished tool exchange, for the hard ceiling.

    The oldest turn that still waits, and everything after it, stay verbatim; so does the call a
    kept result answers. Returns the largest safe cut at or before the oldest waiting turn,
    len(turns) when nothing waits, and 0 when no such cut exists.
    """
    waiting = _scan(turns).waiting
    limit = waiting[0] if waiting else len(turns)
    return max((c for c in safe_cuts(turns) if c <= limit), default=0)


def fit_cut(
    turns: Sequence[TurnInfo], *, start: int, limit: int, other_tokens: int, threshold_tokens: int
) -> int:
    """Make the compaction pay for itself: replace more until the request fits.

    From `start`, moves to later safe cuts (never beyond `limit`) until `other_tokens` plus the kept
    tail is at most `threshold_tokens`, and returns the first that fits. When none fits, returns the
    largest safe cut at or before `limit`; 0 when there is none. `other_tokens` is everything else in
    the request after compaction (system prompt, pinned state, the estimated summary, framing).
    A start of 0 means "nothing replaced yet": the search begins at the first safe cut.
    """
    tails = _tails(turns)
    cuts = [c for c in safe_cuts(turns) if c <= limit]
    for c in cuts:
        if c >= start and other_tokens + tails[c] <= threshold_tokens:
            return c
    return cuts[-1] if cuts else 0


def plan_cut(
    turns: Sequence[TurnInfo],
    *,
    keep_recent_tokens: int,
    other_tokens: int,
    threshold_tokens: int,
    forced: bool,
    summary_tokens: int = 0,
    min_gain_tokens: int = 0,
) -> CutPlan:
    """The cut in one call.

    At a boundary (`forced=False`) the whole window may be replaced; under the hard ceiling
    (`forced=True`) only its complete prefix (`complete_prefix`), the recent tail being chosen
    within that prefix. Then `fit_cut` replaces more until the request fits. `cut == 0` means no
    safe cut exists (the caller records over_budget when forced).

    `freed` is what the cut is expected to free: the replaced turns' tokens and the summary in the request now
    (`summary_tokens`), less the new summary's expected size (`expected_summary_tokens`). At a boundary the
    plan `pays` when that reaches `min_gain_tokens`; the cut is never moved to make it pay (that would eat the
    verbatim tail the class keeps): a plan that does not pay is not run, and the turns accumulate until one
    does. Under the hard ceiling every plan pays: the budget is not negotiable.
    """
    if forced:
        limit = complete_prefix(turns)
        start = min(choose_cut(turns[:limit], keep_recent_tokens), limit)
    else:
        limit = len(turns)
        start = choose_cut(turns, keep_recent_tokens)
    cut = fit_cut(
        turns, start=start, limit=limit, other_tokens=other_tokens, threshold_tokens=threshold_tokens
    )
    tails = _tails(turns)
    fits = other_tokens + tails[cut] <= threshold_tokens
    replaced = tails[0] - tails[cut]
    freed = replaced + summary_tokens - expected_summary_tokens(replaced, summary_tokens) if cut else 0
    pays = forced or (cut > 0 and freed >= min_gain_tokens)
    return CutPlan(cut=cut, forced=forced, fits=fits, freed=freed, pays=pays)
