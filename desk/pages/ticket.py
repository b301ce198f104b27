"""Reads for the ticket page: the timeline, the figures in force at each turn, the pinned state with
its audit trail as diffs, and the ticket's JSON export.

Every figure is read from where it was stored when it happened: a turn's context size, budget and
threshold from the turn, a compaction's before and after from its event. A later change to the class
moves nothing that is already on the page.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from decimal import Decimal
from itertools import accumulate
from typing import Any

from django.db import connection
from django.db.models import OuterRef, Q, Subquery
from django.http import Http404

from compaction.models import CompactionEvent, tokens_saved
from compaction.selectors import CompactionTotals, totals_of
from core.tokens import RequestSize
from core.vocabulary import CompactionStatus
from desk.pages.diff import DiffLine, change_diff
from desk.pages.labels import PinnedMark, pinned_marks_by_turn
from tickets.models import (
    PinnedState,
    RefusedAttempt,
    StateChange,
    Ticket,
    TicketStatus,
    TicketStatusChange,
    Turn,
)

# How much of a long ticket one page shows. The counts are the page's, not the database's: every read
# below is bounded by them (keyset on the turn number, the state version or the status change), so the
# page costs the same at 20 turns and at 5,000.
TIMELINE_WINDOW = 30  # turns
AUDIT_WINDOW = 20  # state changes
STATUS_WINDOW = 20  # status changes
CHART_MAX_POINTS = 240  # points of the context chart; a longer ticket is sampled (see `sample_indices`)
COMPACTIONS_SHOWN = 6  # compaction pills in the header: the newest, and as many of those worth a look
REFUSED_SHOWN = 5  # refused attempts listed in the header


def get_ticket(ticket_id: str) -> Ticket:
    """The ticket with its class and pinned state, or 404."""
    try:
        return Ticket.objects.select_related("ticket_class", "pinned_state").get(ticket_id=ticket_id)
    except Ticket.DoesNotExist:
        raise Http404(f"no ticket {ticket_id}") from None


# What the chart reads of every turn, as plain rows: `values_list(*SERIES_FIELDS)` (rows, not model
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
    turn_count: int | None = None
    # Compactions that replaced turns, and how many of them the points carry (fewer only when sampled).
    compaction_count: int = 0
    compactions_drawn: int = 0

    @property
    def thinned(self) -> bool:
        return self.compactions_drawn < self.compaction_count

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


def _turn_columns() -> dict[str, str]:
    """The turn table's name and the columns the sample reads, quoted for this database."""
    quote = connection.ops.quote_name
    columns = {f.name: str(f.column) for f in Turn._meta.concrete_fields}
    names = ("ticket", *SERIES_FIELDS)
    return {name: quote(columns[name]) for name in names} | {"table": quote(Turn._meta.db_table)}


def sampled_series_rows(ticket: Ticket, *, keep_turns: Iterable[int], limit: int) -> list[SeriesRow] | None:
    """The chart's rows of a ticket longer than `limit`, sampled by the database exactly as
    `sample_indices` samples them (turn n is index n - 1: a ticket's turns are numbered 1 to its turn
    count), so `limit` rows come back instead of every turn. One query; a second only when the threshold
    or budget in force changed along the ticket (those turns are kept too, which leaves fewer buckets).
    None when some turn was stored without its figures: those are replayed from every turn.
    """
    count = ticket.turn_count
    keep = [n - 1 for n in keep_turns]
    must = _must_keep(count, keep, limit)
    rows = _sample_query(ticket, count=count, must=must, buckets=limit - len(must))
    if any(row[2] == 0 for row in rows):  # token_budget
        return None
    changed = [row[0] - 1 for row in rows if row[-1]]
    if changed:
        exact = _must_keep(count, [*keep, *changed], limit)
        if exact != must:
            must = exact
            rows = _sample_query(ticket, count=count, must=must, buckets=limit - len(must))
    kept = {i + 1 for i in must}
    return [row[:5] for row in rows if row[5] == 1 or row[0] in kept]  # type: ignore[misc]


def _sample_query(ticket: Ticket, *, count: int, must: list[int], buckets: int) -> list[tuple[int, ...]]:
    """Rows of `SERIES_FIELDS` + (rank in its bucket by context size, changed): each bucket's first highest
    turn, the turns at indices `must`, and every turn where the figures in force changed or are missing."""
    c = _turn_columns()
    columns = ", ".join(c[name] for name in SERIES_FIELDS)
    number, budget, threshold = c["number"], c["token_budget"], c["threshold_tokens"]
    wanted = ", ".join(["%s"] * len(must))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns}, peak, changed FROM (SELECT {columns}, "
            f"ROW_NUMBER() OVER (PARTITION BY ({number} - 1) * %s / %s "
            f"ORDER BY {c['context_tokens']} DESC, {number}) AS peak, "
            f"CASE WHEN {budget} = 0 OR {budget} <> LAG({budget}) OVER (ORDER BY {number}) "
            f"OR {threshold} <> LAG({threshold}) OVER (ORDER BY {number}) THEN 1 ELSE 0 END AS changed "
            f"FROM {c['table']} WHERE {c['ticket']} = %s) AS ranked "
            f"WHERE peak = 1 OR changed = 1 OR {number} IN ({wanted}) ORDER BY {number}",
            [buckets, count, ticket.pk, *(i + 1 for i in must)],
        )
        return [tuple(row) for row in cursor.fetchall()]


def context_series(
    *,
    ticket: Ticket,
    turns: Sequence[SeriesRow],
    events: Sequence[EventFigures],
    changes: Sequence[StateChange],
    limit: int | None = None,
    sample_of: int | None = None,
) -> ContextSeries:
    """Per-turn context size with the budget and threshold in force, from what each turn stored
    (`turns` are rows of `SERIES_FIELDS`, in order).

    With `limit`, a longer series is sampled by `sample_indices`, keeping every compaction's point and
    every point where the threshold or budget in force changed. `sample_of` says `turns` are already
    such a sample (`sampled_series_rows`) of a ticket of that many turns.
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
    if sample_of is None:
        turn_count, compaction_count = len(turns), sum(1 for n in numbers if n in replacing)
    else:
        turn_count, compaction_count = sample_of, sum(1 for n in replacing if 1 <= n <= sample_of)
    return ContextSeries(
        points=points,
        sampled=len(points) < turn_count,
        turn_count=turn_count,
        compaction_count=compaction_count,
        compactions_drawn=sum(1 for p in points if p.compaction),
    )


@dataclass(frozen=True)
class TimelineWindow:
    """The turns `first`..`last` of a ticket with `turn_count` turns: the part of the timeline on the page."""

    first: int
    last: int
    turn_count: int

    @property
    def has_older(self) -> bool:
        return self.first > 1

    @property
    def has_newer(self) -> bool:
        return self.last < self.turn_count

    def __contains__(self, number: object) -> bool:
        return isinstance(number, int) and self.first <= number <= self.last


def timeline_window(
    turn_count: int,
    *,
    turn: int | None = None,
    before: int | None = None,
    after: int | None = None,
    size: int = TIMELINE_WINDOW,
) -> TimelineWindow:
    """Which turns the page shows: the newest `size` by default; the `size` turns before turn `before`
    (the older page), or after turn `after` (the newer page); or, for `turn`, a window with that turn in
    its middle (what a compaction marker or a pinned item links to). A number past either end of the
    ticket gives the window at that end: a stale link still lands on turns.

    Turn numbers run from 1 to `turn_count` with no gap (`receive_turn` numbers them), so a window is a
    range of numbers and reading it is a keyset read on `number`, not an OFFSET.
    """
    if turn_count < 1:
        return TimelineWindow(first=1, last=0, turn_count=0)
    if turn is not None:
        first = max(1, min(turn, turn_count) - size // 2)
    elif before is not None:
        first = max(1, min(before, turn_count + 1) - size)
    elif after is not None:
        first = max(1, min(after + 1, turn_count - size + 1))
    else:
        first = max(1, turn_count - size + 1)
    last = min(turn_count, first + size - 1)
    first = max(1, last - size + 1)
    return TimelineWindow(first=first, last=last, turn_count=turn_count)


@dataclass
class TimelineTurn:
    turn: Turn
    replaced_by: int | None = None
    replaced_at: int | None = None  # the turn of the compaction that replaced it: where its marker is
    marks: list[PinnedMark] = field(default_factory=list)
    events: list[EventFigures] = field(default_factory=list)
    refused: list[RefusedAttempt] = field(default_factory=list)


def refused_turn(attempt: RefusedAttempt) -> int:
    """The turn a refused attempt is shown at: the thread's newest turn then, else the turn it named."""
    return attempt.thread_turn or attempt.at_turn or 0


@dataclass(frozen=True)
class AuditRow:
    """One state change with what it did, as a diff of the state before and after."""

    change: StateChange
    diff: list[DiffLine]


def audit_rows(changes: list[StateChange]) -> list[AuditRow]:
    return [AuditRow(change=c, diff=change_diff(c.change)) for c in changes]


@dataclass(frozen=True)
class TicketPage:
    ticket: Ticket
    pinned: PinnedState
    state: dict[str, Any]
    timeline: list[TimelineTurn]
    # Every compaction of the ticket, with the columns the cards, the chart and the markers read.
    compactions: list[EventFigures]
    audit: list[AuditRow]
    series: ContextSeries
    window: TimelineWindow = field(default_factory=lambda: TimelineWindow(first=1, last=0, turn_count=0))
    # Refused attempts whose turn is not on the timeline (none recorded, or past the stored turns): shown
    # with the newest turns.
    unplaced_refused: list[RefusedAttempt] = field(default_factory=list)
    # Every refused attempt, newest first, each with the turn it is shown at.
    refused: list[tuple[RefusedAttempt, int]] = field(default_factory=list)
    status_changes: list[TicketStatusChange] = field(default_factory=list)
    # The oldest state version / status change shown, when older ones are left for the next page.
    audit_older_than: int | None = None
    status_older_than: int | None = None

    @property
    def recent_compactions(self) -> list[EventFigures]:
        """The newest compactions, newest first: the header's pills."""
        return self.compactions[::-1][:COMPACTIONS_SHOWN]

    @property
    def flagged_compactions(self) -> list[EventFigures]:
        """Older compactions worth a look (a coverage miss, forced, no safe cut, failed), newest first."""
        recent = {e.number for e in self.recent_compactions}
        flagged = [
            e
            for e in reversed(self.compactions)
            if e.number not in recent and (e.coverage_missing_count or e.status in WORTH_A_LOOK)
        ]
        return flagged[:COMPACTIONS_SHOWN]

    @property
    def older_compactions(self) -> int:
        """How many compactions the header does not show."""
        return len(self.compactions) - len(self.recent_compactions) - len(self.flagged_compactions)

    @property
    def recent_refused(self) -> list[tuple[RefusedAttempt, int]]:
        return self.refused[:REFUSED_SHOWN]

    @property
    def older_refused(self) -> int:
        return len(self.refused) - len(self.recent_refused)

    @property
    def status_choices(self) -> list[tuple[str, str]]:
        return list(TicketStatus.choices)

    @property
    def compaction_totals(self) -> CompactionTotals:
        """What compaction did and cost on this ticket, from the events already loaded."""
        return totals_of(self.compactions)

    @property
    def threshold_now(self) -> int:
        """The class's threshold today: the one the ticket's next turn is held to."""
        return self.ticket.ticket_class.threshold_tokens


WORTH_A_LOOK = (CompactionStatus.FORCED, CompactionStatus.OVER_BUDGET, CompactionStatus.FAILED)


def audit_trail(
    ticket: Ticket, *, limit: int | None = None, before_version: int | None = None
) -> list[StateChange]:
    """The ticket's state changes with their actor, newest first: all of them, or the newest `limit`
    made before `before_version` (a keyset on the version)."""
    changes = StateChange.objects.filter(ticket=ticket).select_related("actor").order_by("-to_version")
    if before_version is not None:
        changes = changes.filter(to_version__lt=before_version)
    return list(changes if limit is None else changes[:limit])


def status_trail(
    ticket: Ticket, *, limit: int | None = None, before: int | None = None
) -> list[TicketStatusChange]:
    """The ticket's status changes with their actor, newest first: all of them, or the newest `limit`
    older than the change with id `before` (a keyset on its time and id)."""
    changes = (
        TicketStatusChange.objects.filter(ticket=ticket)
        .select_related("actor")
        .order_by("-created_at", "-pk")
    )
    if before is not None:
        then = Subquery(
            TicketStatusChange.objects.filter(pk=before, ticket=OuterRef("ticket")).values("created_at")[:1]
        )
        changes = changes.filter(Q(created_at__lt=then) | Q(created_at=then, pk__lt=before))
    return list(changes if limit is None else changes[:limit])


def ticket_page(
    ticket: Ticket,
    *,
    turn: int | None = None,
    before: int | None = None,
    after: int | None = None,
    audit_before: int | None = None,
    status_before: int | None = None,
) -> TicketPage:
    """Everything the ticket page shows, for the window of turns chosen by `timeline_window`: 6 queries
    after the ticket itself (one more when the threshold in force changed along a long ticket, two when
    some turn was stored without its figures), whatever its length.

    Only the window's turns are read whole; the chart reads five numbers per turn of a short ticket and
    the database's sample of a long one (`sampled_series_rows`), the header and the markers read every
    compaction's figures but not its summary, and the audit trail and the status changes read their
    newest rows (or those before `audit_before` / `status_before`).
    """
    pinned = ticket.pinned_state
    state = pinned.agent_json()
    window = timeline_window(ticket.turn_count, turn=turn, before=before, after=after)
    turns = list(
        Turn.objects.filter(ticket=ticket, number__gte=window.first, number__lte=window.last).order_by(
            "number"
        )
    )
    compactions = event_figures(ticket)
    # A long ticket's chart is sampled by the database; a short one's (or one with turns stored before
    # turns kept their figures, which are replayed from every turn) reads every turn.
    sample: list[SeriesRow] | None = None
    if ticket.turn_count > CHART_MAX_POINTS:
        replacing = CompactionStatus.replacing()
        sample = sampled_series_rows(
            ticket,
            keep_turns=[e.at_turn for e in compactions if e.status in replacing],
            limit=CHART_MAX_POINTS,
        )
    figures: list[SeriesRow] = (
        sample
        if sample is not None
        else list(Turn.objects.filter(ticket=ticket).order_by("number").values_list(*SERIES_FIELDS))
    )
    # Only a turn stored before turns kept their figures needs the state's history to be replayed.
    replay_changes = (
        list(StateChange.objects.filter(ticket=ticket).only("to_version", "thread_turn", "after_tokens"))
        if sample is None and not all(budget for _number, _context, budget, *_rest in figures)
        else []
    )
    changes = audit_trail(ticket, limit=AUDIT_WINDOW + 1, before_version=audit_before)
    statuses = status_trail(ticket, limit=STATUS_WINDOW + 1, before=status_before)
    refused = [
        (attempt, refused_turn(attempt))
        for attempt in RefusedAttempt.objects.filter(ticket=ticket)
        .defer("request")
        .order_by("-created_at", "-pk")
    ]
    refused_by_turn: dict[int, list[RefusedAttempt]] = {}
    unplaced: list[RefusedAttempt] = []
    for attempt, number in reversed(refused):
        if number in window:
            refused_by_turn.setdefault(number, []).append(attempt)
        elif not 1 <= number <= ticket.turn_count:
            unplaced.append(attempt)
    marks = pinned_marks_by_turn(state)
    events_by_turn: dict[int, list[EventFigures]] = {}
    replaced: dict[int, EventFigures] = {}
    for event in compactions:
        if event.at_turn in window:
            events_by_turn.setdefault(event.at_turn, []).append(event)
        if (
            event.status in CompactionStatus.replacing()
            and event.first_replaced_turn
            and event.last_replaced_turn
        ):
            for n in range(
                max(event.first_replaced_turn, window.first), min(event.last_replaced_turn, window.last) + 1
            ):
                replaced[n] = event
    timeline = [
        TimelineTurn(
            turn=t,
            replaced_by=replaced[t.number].number if t.number in replaced else None,
            replaced_at=replaced[t.number].at_turn if t.number in replaced else None,
            marks=marks.get(t.number, []),
            events=events_by_turn.get(t.number, []),
            refused=refused_by_turn.get(t.number, []),
        )
        for t in turns
    ]
    return TicketPage(
        ticket=ticket,
        pinned=pinned,
        state=state,
        timeline=timeline,
        window=window,
        compactions=compactions,
        audit=audit_rows(changes[:AUDIT_WINDOW]),
        audit_older_than=changes[AUDIT_WINDOW - 1].to_version if len(changes) > AUDIT_WINDOW else None,
        series=context_series(
            ticket=ticket,
            turns=figures,
            events=compactions,
            changes=replay_changes,
            limit=CHART_MAX_POINTS,
            sample_of=ticket.turn_count if sample is not None else None,
        ),
        unplaced_refused=unplaced if not window.has_newer else [],
        refused=refused,
        status_changes=statuses[:STATUS_WINDOW],
        status_older_than=statuses[STATUS_WINDOW - 1].pk if len(statuses) > STATUS_WINDOW else None,
    )


@dataclass(frozen=True)
class StatePanel:
    """What a correction changes on the ticket page: the state panel and the header cards beside it."""

    ticket: Ticket
    state: dict[str, Any]
    audit: list[AuditRow]
    audit_older_than: int | None = None


def state_panel(ticket: Ticket) -> StatePanel:
    """The pinned state, the newest of the audit trail and the ticket's current figures, read after a
    correction."""
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)
    changes = audit_trail(ticket, limit=AUDIT_WINDOW + 1)
    return StatePanel(
        ticket=pinned.ticket,
        state=pinned.agent_json(),
        audit=audit_rows(changes[:AUDIT_WINDOW]),
        audit_older_than=changes[AUDIT_WINDOW - 1].to_version if len(changes) > AUDIT_WINDOW else None,
    )


def changes_since(ticket: Ticket, version: int) -> list[StateChange]:
    """Changes made after `version`: what a stale editor did not see."""
    return list(
        StateChange.objects.filter(ticket=ticket, from_version__gte=version)
        .select_related("actor")
        .defer("change")
        .order_by("to_version")
    )


EXPORT_FORMAT = "sundry-ticket-export/2"


def ticket_export(ticket: Ticket) -> dict[str, Any]:
    """The ticket as one JSON document: its state, turns, compaction events (with their reviews) and
    state changes, each with the figures stored when it happened (4 queries after the ticket)."""
    ticket_class = ticket.ticket_class
    turns = Turn.objects.filter(ticket=ticket).select_related("posted_by").order_by("number")
    events = CompactionEvent.objects.filter(ticket=ticket).prefetch_related("reviews__by").order_by("number")
    changes = StateChange.objects.filter(ticket=ticket).select_related("actor").order_by("to_version")
    return {
        "format": EXPORT_FORMAT,
        "ticket": {
            "ticket_id": ticket.ticket_id,
            "order_id": ticket.order_id,
            "seller_type": ticket.seller_type,
            "status": ticket.status,
            "ticket_class": ticket_class.slug,
            "token_budget": ticket_class.token_budget,
            "threshold_tokens": ticket_class.threshold_tokens,
            "context_tokens": ticket.context_tokens,
            "turn_count": ticket.turn_count,
            "created_at": ticket.created_at,
            "updated_at": ticket.updated_at,
        },
        "state": ticket.pinned_state.agent_json(),
        "turns": [
            {
                "number": t.number,
                "role": t.role,
                "content": t.content,
                "tool": t.tool,
                "args": t.args,
                "tool_call_id": t.tool_call_id,
                "boundary": t.boundary,
                "tokens": t.tokens,
                "context_tokens": t.context_tokens,
                "token_budget": t.token_budget,
                "threshold_tokens": t.threshold_tokens,
                "posted_by": t.posted_by.username if t.posted_by else None,
                "created_at": t.created_at,
            }
            for t in turns
        ],
        "compactions": [
            {
                "number": e.number,
                "at_turn": e.at_turn,
                "status": e.status,
                "reason": e.reason,
                "replaced_turns": [e.first_replaced_turn, e.last_replaced_turn]
                if e.first_replaced_turn is not None
                else None,
                "tokens_before": e.tokens_before,
                "tokens_after": e.tokens_after,
                "threshold_tokens": e.threshold_tokens,
                "token_budget": e.token_budget,
                "attempts": e.attempts,
                "validation_errors": e.validation_errors,
                "summarizer_backend": e.summarizer_backend,
                "summarizer_model": e.summarizer_model,
                "latency_ms": e.latency_ms,
                "summarizer_input_tokens": e.summarizer_input_tokens,
                "summarizer_output_tokens": e.summarizer_output_tokens,
                "cost_usd": str(e.cost_usd),
                "summary": e.summary,
                "coverage": e.coverage,
                "created_at": e.created_at,
                "reviews": [
                    {"verdict": r.verdict, "comment": r.comment, "by": r.by.username, "at": r.created_at}
                    for r in e.reviews.all()
                ],
            }
            for e in events
        ],
        "state_changes": [
            {
                "op": c.op,
                "actor_kind": c.actor_kind,
                "actor": c.actor.username if c.actor else None,
                "from_version": c.from_version,
                "to_version": c.to_version,
                "at_turn": c.at_turn,
                "thread_turn": c.thread_turn,
                "reason": c.reason,
                "change": c.change,
                "created_at": c.created_at,
            }
            for c in changes
        ],
    }
