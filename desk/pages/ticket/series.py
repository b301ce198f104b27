"""The ticket page's context chart: every turn's request size with the budget and threshold in force
at that turn, read from what each turn stored (replayed from stored counts for a turn stored before
turns kept their figures), sampled to at most `CHART_MAX_POINTS` points on a long ticket.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal
from itertools import accumulate

from compaction.models import CompactionEvent, tokens_saved
from core.tokens import RequestSize
from core.vocabulary import CompactionStatus
from tickets.models import StateChange, Ticket

CHART_MAX_POINTS = 240  # points of the context chart; a longer ticket is sampled (see `sample_indices`)

# instances or named rows: a long ticket has thousands).
SERIES_FIELDS = ("number", "context_tokens", "token_budget", "threshold_tokens", "tokens")
SeriesRow = tuple[int, int, int, int, int]


@dataclass(slots=True)
class EventFigures:
    """A compaction event as the ticket page reads it: every figure, not the summary, the coverage or the
    errors. A long ticket has hundreds of events: plain rows cost a fraction of model instances (and it is
    not frozen because a frozen dataclass's `__init__` costs twice as much)."""

    number: int
    at_turn: int
    status: str
    first_replaced_turn: int | None
    last_replaced_turn: int | None
    tokens_before: int
    tokens_after: int | None
    threshold_tokens: int
    token_budget: int
    attempts: int
    summary_tokens: int
    coverage_missing_count: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    cost_usd: Decimal
    latency_ms: int

    @property
    def tokens_saved(self) -> int:
        return tokens_saved(self.tokens_before, self.tokens_after)

    def get_status_display(self) -> str:
        return str(CompactionStatus(self.status).label)


PAGE_EVENT_FIELDS = tuple(f.name for f in fields(EventFigures))


def event_figures(ticket: Ticket) -> list[EventFigures]:
    """The ticket's compaction events in order, as figures (one query)."""
    rows = CompactionEvent.objects.filter(ticket=ticket).order_by("number").values_list(*PAGE_EVENT_FIELDS)
    return [EventFigures(*row) for row in rows]


@dataclass(frozen=True)
class ContextPoint:
    """The assembled request right after turn `turn` was stored, and the figures in force then.

    `compaction` is the compaction that replaced turns at this turn, if any: the chart draws its drop
    from the event's own before and after, the figures its marker and the API show.
    """

    turn: int
    tokens: int
    threshold_tokens: int
    token_budget: int
    compaction: EventFigures | None = None
    replayed: bool = False  # a turn stored before turns kept their figures: replayed from stored counts


@dataclass(frozen=True)
class ContextSeries:
    """The chart's points: every turn, or on a long ticket a sample (`sampled` says so).

    `first_turn` and `last_turn` are the ticket's, whatever was sampled: the chart's x axis spans them.
    """

    points: list[ContextPoint]
    sampled: bool = False
    turn_count: int | None = None  # the turns the points are drawn from (a sample's, when sampled)
    # Compactions that replaced turns (the ticket's, when the page says so), and how many the points carry.
    compaction_count: int = 0
    compactions_drawn: int = 0
    # The first turn the chart covers, and the ticket's turns: the page's chart covers its newest turns.
    from_turn: int = 1
    ticket_turns: int | None = None

    @property
    def thinned(self) -> bool:
        return self.compactions_drawn < self.compaction_count

    @property
    def older_compactions(self) -> int:
        """Compactions that replaced turns and are not drawn (before the chart's turns, or thinned)."""
        return max(self.compaction_count - self.compactions_drawn, 0)

    @property
    def partial(self) -> bool:
        """The chart covers only the ticket's newest turns."""
        return self.from_turn > 1

    @property
    def first_turn(self) -> int:
        return self.points[0].turn if self.points else 0

    @property
    def last_turn(self) -> int:
        return self.points[-1].turn if self.points else 0

    @property
    def peak(self) -> int:
        highest = 0
        for p in self.points:
            highest = max(
                highest, p.tokens, p.token_budget, p.compaction.tokens_before if p.compaction else 0
            )
        return highest

    @property
    def latest(self) -> ContextPoint | None:
        return self.points[-1] if self.points else None


def _replayed_sizes(
    *,
    ticket: Ticket,
    turns: Sequence[SeriesRow],
    events: Sequence[EventFigures],
    changes: Sequence[StateChange],
) -> dict[int, int]:
    """Per-turn request size replayed from stored counts, for turns stored without their figure.

    For turn n: system prompt + the pinned state as of n + the summary active before n + the turns
    after the ones it replaced, up to n, + the reply priming (as migration 0006b fills them).
    """
    tokens_by_number = {number: tokens for number, *_figures, tokens in turns}
    last = max(tokens_by_number, default=0)
    prefix = [0, *accumulate(tokens_by_number.get(n, 0) for n in range(1, last + 1))]
    ordered_changes = sorted(changes, key=lambda c: c.to_version)
    replacing = sorted(
        (e for e in events if e.status in CompactionStatus.replacing() and e.last_replaced_turn),
        key=lambda e: e.at_turn,
    )
    sizes: dict[int, int] = {}
    change_index = event_index = state_tokens = 0
    active: EventFigures | None = None
    for n in range(1, last + 1):
        while change_index < len(ordered_changes) and ordered_changes[change_index].thread_turn <= n:
            state_tokens = ordered_changes[change_index].after_tokens
            change_index += 1
        while event_index < len(replacing) and replacing[event_index].at_turn < n:
            active = replacing[event_index]
            event_index += 1
        first_active = (active.last_replaced_turn or 0) + 1 if active else 1
        turn_tokens = prefix[n] - prefix[first_active - 1] if first_active <= n else 0
        summary = active.summary_tokens if active else 0
        sizes[n] = RequestSize(
            system=ticket.system_prompt_tokens, state=state_tokens, summary=summary, turns=turn_tokens
        ).total
    return sizes


def _must_keep(count: int, keep: Iterable[int], limit: int) -> list[int]:
    """The indices a sample of `limit` out of `count` keeps whatever the values: the first, the last and
    `keep`, thinned evenly should they alone take more than four fifths of the limit."""
    must = sorted({0, count - 1, *(i for i in keep if 0 <= i < count)})
    room = limit * 4 // 5
    if len(must) > room:
        step = (len(must) - 1) / (room - 1)
        must = sorted({must[round(i * step)] for i in range(room)})
    return must


def sample_indices(tokens: list[int], *, keep: Iterable[int] = (), limit: int) -> list[int]:
    """At most `limit` indices of a series, in order: all of them when they fit; otherwise the first and
    the last, every index in `keep` (the compactions, where the threshold or budget changed), and the
    highest point (the first of equals) of each of the buckets that fill the rest, so a peak over the
    threshold is never sampled away. Index i is in bucket i * buckets // count, as the database's
    sample of a long ticket (`sampled_series_rows`) puts it.

    Should `keep` alone take more than four fifths of the limit (a compaction every few turns), it is
    thinned evenly to that many: the chart has no room to draw each one apart anyway.
    """
    count = len(tokens)
    if count <= limit:
        return list(range(count))
    chosen = set(_must_keep(count, keep, limit))
    buckets = limit - len(chosen)
    for b in range(buckets):
        low, high = -(-b * count // buckets), -(-(b + 1) * count // buckets)
        if low < high:
            stretch = tokens[low:high]
            chosen.add(low + stretch.index(max(stretch)))
    return sorted(chosen)


def context_series(
    *,
    ticket: Ticket,
    turns: Sequence[SeriesRow],
    events: Sequence[EventFigures],
    changes: Sequence[StateChange],
    limit: int | None = None,
    sample_of: int | None = None,
    compaction_count: int | None = None,
    ticket_turns: int | None = None,
) -> ContextSeries:
    """Per-turn context size with the budget and threshold in force, from what each turn stored
    (`turns` are rows of `SERIES_FIELDS`, in order).

    With `limit`, a longer series is sampled by `sample_indices`, keeping every compaction's point and
    every point where the threshold or budget in force changed. `sample_of` says `turns` are already
    such a sample (`sampled_series_rows`) of that many turns. `compaction_count` and `ticket_turns`, when
    given, are the ticket's, for a chart of its newest turns and newest compactions only.
    """
    ticket_class = ticket.ticket_class
    kinds = CompactionStatus.replacing()
    replacing = {e.at_turn: e for e in events if e.status in kinds}
    numbers, stored_tokens, stored_budgets, stored_thresholds, _turn_tokens = (
        tuple(zip(*turns, strict=True)) if turns else ((), (), (), (), ())
    )
    legacy = not all(stored_budgets)
    if legacy:
        replayed = _replayed_sizes(ticket=ticket, turns=turns, events=events, changes=changes)
        stored = [bool(b) for b in stored_budgets]
        tokens = [
            c if s and c else replayed.get(n, 0)
            for n, c, s in zip(numbers, stored_tokens, stored, strict=True)
        ]
        thresholds = [
            t if s else ticket_class.threshold_tokens for t, s in zip(stored_thresholds, stored, strict=True)
        ]
        budgets = [b if s else ticket_class.token_budget for b, s in zip(stored_budgets, stored, strict=True)]
    else:
        tokens, thresholds, budgets = list(stored_tokens), list(stored_thresholds), list(stored_budgets)
    indices: Sequence[int] = range(len(turns))
    if limit is not None and len(turns) > limit:
        in_force = list(zip(thresholds, budgets, strict=True))
        changed = (i for i in range(1, len(in_force)) if in_force[i] != in_force[i - 1])
        compacted = (i for i, n in enumerate(numbers) if n in replacing)
        indices = sample_indices(tokens, keep=[*compacted, *changed], limit=limit)
    points = [
        ContextPoint(
            turn=numbers[i],
            tokens=tokens[i],
            threshold_tokens=thresholds[i],
            token_budget=budgets[i],
            compaction=replacing.get(numbers[i]),
            replayed=not stored_budgets[i],
        )
        for i in indices
    ]
    first = numbers[0] if numbers else 1
    if sample_of is None:
        turn_count, in_turns = len(turns), sum(1 for n in numbers if n in replacing)
    else:
        turn_count = sample_of
        in_turns = sum(1 for n in replacing if first <= n < first + sample_of)
    return ContextSeries(
        points=points,
        sampled=len(points) < turn_count,
        turn_count=turn_count,
        compaction_count=in_turns if compaction_count is None else compaction_count,
        compactions_drawn=sum(1 for p in points if p.compaction),
        from_turn=first,
        ticket_turns=turn_count if ticket_turns is None else ticket_turns,
    )
