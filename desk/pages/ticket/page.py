"""Reads for the ticket page: the timeline window, the figures in force at each turn, the header's
compactions and refused attempts, and the pinned state with its audit trail.

Every figure is read from where it was stored when it happened: a turn's context size, budget and
threshold from the turn, a compaction's before and after from its event. A later change to the class
moves nothing that is already on the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Case, Count, F, IntegerField, Max, Q, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.http import Http404

from compaction.costs import ticket_savings
from compaction.models import CompactionEvent
from compaction.selectors import CompactionTotals
from core.cost import CostSummary
from core.vocabulary import CompactionStatus
from desk.pages.labels import PinnedMark, TurnPins, pins_by_turn
from desk.pages.ticket.actions import ActionList, action_list, inline_state_json
from desk.pages.ticket.live import Marks
from desk.pages.ticket.sampler import sampled_series_rows
from desk.pages.ticket.series import (
    CHART_MAX_POINTS,
    PAGE_EVENT_FIELDS,
    SERIES_FIELDS,
    ContextSeries,
    EventFigures,
    SeriesRow,
    context_series,
    event_figures,
)
from desk.pages.ticket.trails import (
    AUDIT_WINDOW,
    STATUS_WINDOW,
    AuditRow,
    ReviewRow,
    audit_trail,
    status_trail,
    trail_rows,
)
from tickets.models import (
    PinnedState,
    RefusedAttempt,
    StateChange,
    Ticket,
    TicketStatus,
    TicketStatusChange,
    Turn,
    served_action_texts,
)

# How much of a long ticket one page shows. The counts are the page's, not the database's: every read
# below is bounded by them (keyset on the turn number, the state version or the status change), so the
# page costs the same at 20 turns and at 5,000.
TIMELINE_WINDOW = 30  # turns
COMPACTIONS_SHOWN = 6  # compaction pills in the header: the newest, and as many of those worth a look
REFUSED_SHOWN = 5  # refused attempts listed in the header
REFUSED_READ = 100  # refused attempts read for one page at most: the header's, the window's and the unplaced
# The chart covers the newest turns only: at most CHART_SPAN of them (sampled to CHART_MAX_POINTS points), and
# no further back than needed to draw the newest CHART_COMPACTIONS compactions that replaced turns. However
# many turns and compactions the ticket has, the chart reads that many turns and draws that many drops; a
# line under it says how many older compactions there are and links to the timeline at the newest of them.
CHART_SPAN = 10 * CHART_MAX_POINTS  # turns
CHART_COMPACTIONS = 24  # compaction drops
# Pinned items labelled at one turn of the timeline; past this a line counts the rest (an agent can record
# thousands of actions at one turn: they are all in the state panel's links).
PINS_PER_TURN = 8
# What the compactions saved needs every working turn of the ticket (`compaction.costs.ticket_savings`):
# past this many turns the page asks for that line on a request of its own (htmx, on load).
SAVINGS_INLINE_TURNS = CHART_SPAN


def get_ticket(ticket_id: str) -> Ticket:
    """The ticket with its class and pinned state, its actions' served texts joined, or 404. The state's stored
    items are left unread: the pages show the agent-facing state (`agent_json`), and a state of 2,000 actions
    is half a megabyte of JSON; whatever asks for the items reads them then."""
    try:
        return (
            Ticket.objects.select_related("ticket_class", "pinned_state")
            .defer("pinned_state__data")
            .annotate(**served_action_texts("pinned_state__pk", model=False))
            .get(ticket_id=ticket_id)
        )
    except Ticket.DoesNotExist:
        raise Http404(f"no ticket {ticket_id}") from None


def _figures(events: Any) -> list[EventFigures]:
    """Events as the page's plain rows of figures (no summary, coverage or errors)."""
    return [EventFigures(*row) for row in events.values_list(*PAGE_EVENT_FIELDS)]


@dataclass(frozen=True)
class CompactionCounts:
    """Every compaction of a ticket, counted and summed in one aggregate query."""

    total: int
    replacing: int
    newest: int  # the highest number, 0 before any
    totals: CompactionTotals


def compaction_counts(ticket: Ticket) -> CompactionCounts:
    """The ticket's compactions counted and summed by the database (one query, no row per event): what
    `compaction.selectors.totals_of` sums over loaded events, with the count, the replacing ones and the
    newest number."""
    zero = Value(0)
    row = CompactionEvent.objects.filter(ticket=ticket).aggregate(
        total=Count("pk"),
        replacing=Count("pk", filter=Q(status__in=CompactionStatus.replacing())),
        newest=Coalesce(Max("number"), zero),
        applied=Count("pk", filter=Q(status=CompactionStatus.APPLIED)),
        failed=Count("pk", filter=Q(status=CompactionStatus.FAILED)),
        deferred=Count("pk", filter=Q(status=CompactionStatus.DEFERRED)),
        # `tokens_saved`: nothing when tokens_after is None, never below zero.
        tokens_saved=Coalesce(
            Sum(F("tokens_before") - F("tokens_after"), filter=Q(tokens_before__gt=F("tokens_after"))), zero
        ),
        summarizer_input_tokens=Coalesce(Sum("summarizer_input_tokens"), zero),
        summarizer_output_tokens=Coalesce(Sum("summarizer_output_tokens"), zero),
        cost_usd=Coalesce(Sum("cost_usd"), Value(Decimal("0"))),
        latency_ms=Coalesce(Sum("latency_ms"), zero),
    )
    total, replacing, newest = row.pop("total"), row.pop("replacing"), row.pop("newest")
    return CompactionCounts(total=total, replacing=replacing, newest=newest, totals=CompactionTotals(**row))


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
    marks: list[PinnedMark] = field(default_factory=list)  # at most PINS_PER_TURN of them
    events: list[EventFigures] = field(default_factory=list)
    refused: list[RefusedAttempt] = field(default_factory=list)
    more_marks: int = 0  # pinned from this turn beyond `marks`
    categories: list[str] = field(default_factory=list)  # of every item pinned from this turn, each once


def refused_turn(attempt: RefusedAttempt) -> int:
    """The turn a refused attempt is shown at: the thread's newest turn then, else the turn it named."""
    return attempt.thread_turn or attempt.at_turn or 0


def refused_for_page(ticket: Ticket, window: TimelineWindow) -> tuple[list[tuple[RefusedAttempt, int]], int]:
    """The refused attempts the page shows, newest first with the turn each is shown at, and how many the
    ticket has: one query of at most REFUSED_READ rows, however many there are.

    It reads the newest REFUSED_SHOWN (the header's), those shown on the window's turns and those placed at
    no stored turn (shown with the newest turns); past REFUSED_READ, the oldest of the last two are left out.
    """
    attempts = RefusedAttempt.objects.filter(ticket=ticket)
    newest = attempts.order_by("-created_at", "-pk").values("pk")[:REFUSED_SHOWN]
    total = attempts.order_by().values("ticket").annotate(n=Count("pk")).values("n")
    rows = (
        attempts.annotate(
            # refused_turn(), in SQL: the thread's newest turn then, else the turn it named, else 0.
            shown_at=Case(
                When(thread_turn__gt=0, then=F("thread_turn")),
                When(at_turn__gt=0, then=F("at_turn")),
                default=Value(0),
                output_field=IntegerField(),
            ),
            total=Subquery(total, output_field=IntegerField()),
        )
        .filter(
            Q(pk__in=newest)
            | Q(shown_at__gte=window.first, shown_at__lte=window.last)
            | Q(shown_at__lt=1)
            | Q(shown_at__gt=ticket.turn_count)
        )
        .defer("request")
        .order_by("-created_at", "-pk")[:REFUSED_READ]
    )
    shown: list[tuple[RefusedAttempt, int]] = [(attempt, refused_turn(attempt)) for attempt in rows]
    return shown, (int(getattr(shown[0][0], "total", 0) or 0) if shown else 0)


@dataclass(frozen=True)
class TicketPage:
    ticket: Ticket
    pinned: PinnedState
    state: dict[str, Any]
    timeline: list[TimelineTurn]
    audit: list[AuditRow | ReviewRow]
    series: ContextSeries
    # The ticket's compactions counted and summed (one aggregate), and the few the header shows: the newest
    # COMPACTIONS_SHOWN and as many older ones worth a look, newest first.
    counts: CompactionCounts = field(
        default_factory=lambda: CompactionCounts(0, 0, 0, CompactionTotals(0, 0, 0, 0, 0, 0, Decimal(0), 0))
    )
    recent_compactions: list[EventFigures] = field(default_factory=list)
    flagged_compactions: list[EventFigures] = field(default_factory=list)
    window: TimelineWindow = field(default_factory=lambda: TimelineWindow(first=1, last=0, turn_count=0))
    # Refused attempts whose turn is not on the timeline (none recorded, or past the stored turns): shown
    # with the newest turns.
    unplaced_refused: list[RefusedAttempt] = field(default_factory=list)
    # The refused attempts the page shows, newest first, each with the turn it is shown at (refused_for_page).
    refused: list[tuple[RefusedAttempt, int]] = field(default_factory=list)
    # How many the ticket has in all.
    refused_total: int = 0
    status_changes: list[TicketStatusChange] = field(default_factory=list)
    # The oldest state version / status change shown, when older ones are left for the next page.
    audit_older_than: int | None = None
    status_older_than: int | None = None
    # What the compactions saved, when the page read it (a ticket of at most SAVINGS_INLINE_TURNS turns);
    # `savings_deferred` says the page asks for it on its own request instead.
    savings: CostSummary | None = None
    savings_deferred: bool = False
    # The pinned state's actions the panel draws (a bounded part of them, `action_list`), and whether the
    # panel inlines the agent-facing JSON (a state of a few items) or links to it.
    actions: ActionList = field(default_factory=ActionList)
    state_json_inline: bool = True

    @property
    def compaction_count(self) -> int:
        return self.counts.total

    @property
    def older_compactions(self) -> int:
        """How many compactions the header does not show."""
        return self.counts.total - len(self.recent_compactions) - len(self.flagged_compactions)

    @property
    def recent_refused(self) -> list[tuple[RefusedAttempt, int]]:
        return self.refused[:REFUSED_SHOWN]

    @property
    def older_refused(self) -> int:
        return max(self.refused_total - len(self.recent_refused), 0)

    @property
    def status_choices(self) -> list[tuple[str, str]]:
        return list(TicketStatus.choices)

    @property
    def compaction_totals(self) -> CompactionTotals:
        """What compaction did and cost on this ticket (the aggregate's sums)."""
        return self.counts.totals

    @property
    def compaction_savings(self) -> CostSummary | None:
        """What the replacing compactions saved (tokens not re-sent at the working input price) and one
        compaction against one working turn; None before any replaced turns, or when deferred."""
        return self.savings

    @property
    def live_marks(self) -> Marks:
        """How far this page has seen, for its live poll (`ticket_live`)."""
        return Marks(
            turn=self.ticket.turn_count,
            compaction=self.counts.newest,
            refused=max((r.pk for r, _at in self.refused), default=0),
        )

    @property
    def threshold_now(self) -> int:
        """The class's threshold today: the one the ticket's next turn is held to."""
        return self.ticket.ticket_class.threshold_tokens


WORTH_A_LOOK = (CompactionStatus.FORCED, CompactionStatus.OVER_BUDGET, CompactionStatus.FAILED)


def ticket_page(
    ticket: Ticket,
    *,
    turn: int | None = None,
    before: int | None = None,
    after: int | None = None,
    audit_before: int | None = None,
    status_before: int | None = None,
    savings: bool = False,
) -> TicketPage:
    """Everything the ticket page shows, for the window of turns chosen by `timeline_window`: 12 queries
    after the ticket itself (one more when the threshold in force changed along the chart's turns, two when
    some turn was stored without its figures), whatever its length and however many compactions it has.

    Every read is bounded by the page's own counts: the window's turns; the chart's turns (`CHART_SPAN` at
    most, sampled by the database past `CHART_MAX_POINTS`) and its `CHART_COMPACTIONS` newest compactions;
    the header's `COMPACTIONS_SHOWN` newest and worth-a-look ones; the compactions at or replacing the
    window's turns; the newest rows of the audit trail and the status changes (or those before
    `audit_before` / `status_before`). The compactions are counted and summed in one aggregate query.
    What they saved reads every working turn, so it is read here only for a ticket of at most
    SAVINGS_INLINE_TURNS turns (or with `savings`); a longer one's page asks for it on its own request.
    """
    pinned = ticket.pinned_state
    state = pinned.agent_json()
    window = timeline_window(ticket.turn_count, turn=turn, before=before, after=after)
    turns = list(
        Turn.objects.filter(ticket=ticket, number__gte=window.first, number__lte=window.last).order_by(
            "number"
        )
    )
    events = CompactionEvent.objects.filter(ticket=ticket)
    replacing = CompactionStatus.replacing()
    counts = compaction_counts(ticket)
    # The header's: the newest COMPACTIONS_SHOWN (numbered 1 to the newest with no gap, as
    # `compaction.services` numbers them) and the newest as many older ones worth a look, in one read. The
    # ticket's stored flags (compaction.queue_figures) say which kinds it has at all: with none, the read
    # stops at the newest few instead of looking through every event for one.
    newest_shown = counts.newest - COMPACTIONS_SHOWN
    look = Q(number__gt=newest_shown)
    if ticket.has_coverage_miss:
        look |= Q(coverage_missing_count__gt=0)
    kinds = [
        status
        for status, flagged in (
            (CompactionStatus.FORCED, ticket.has_forced),
            (CompactionStatus.OVER_BUDGET, ticket.has_no_safe_cut),
            (CompactionStatus.FAILED, ticket.has_failed),
        )
        if flagged
    ]
    if kinds:
        look |= Q(status__in=kinds)
    header = _figures(events.filter(look).order_by("-number")[: 2 * COMPACTIONS_SHOWN])
    recent = [e for e in header if e.number > newest_shown]
    flagged = [e for e in header if e.number <= newest_shown][:COMPACTIONS_SHOWN]
    # The compactions the timeline marks at the window's turns, and those that replaced turns of the window
    # (the ranges they replaced do not overlap, so at most one per turn; each is after the turns it replaced).
    on_window = _figures(
        events.filter(
            Q(at_turn__gte=window.first, at_turn__lte=window.last)
            | Q(
                status__in=replacing,
                at_turn__gt=window.first,
                first_replaced_turn__lte=window.last,
                last_replaced_turn__gte=window.first,
            )
        ).order_by("number")[: 2 * TIMELINE_WINDOW]
    )
    # The chart: the newest turns, back to just after the compaction before its CHART_COMPACTIONS newest.
    chart_from = max(1, ticket.turn_count - CHART_SPAN + 1)
    newest_replacing = _figures(
        events.filter(status__in=replacing, at_turn__gte=chart_from).order_by("-at_turn")[
            : CHART_COMPACTIONS + 1
        ]
    )
    if len(newest_replacing) > CHART_COMPACTIONS:
        chart_from = newest_replacing.pop().at_turn + 1
    drawn = newest_replacing[::-1]
    span = ticket.turn_count - chart_from + 1
    sample: list[SeriesRow] | None = None
    if span > CHART_MAX_POINTS:
        sample = sampled_series_rows(
            ticket, keep_turns=[e.at_turn for e in drawn], limit=CHART_MAX_POINTS, first=chart_from
        )
        legacy = sample is None
        figures: list[SeriesRow] = sample or []
    else:
        figures = list(
            Turn.objects.filter(ticket=ticket, number__gte=chart_from)
            .order_by("number")
            .values_list(*SERIES_FIELDS)
        )
        legacy = not all(budget for _number, _context, budget, *_rest in figures)
    replay_changes: list[StateChange] = []
    if legacy:
        # Some turn was stored before turns kept their figures: its size is replayed from stored counts,
        # which needs every turn before it, the state's history and every compaction (an old ticket only).
        sample = None
        if chart_from > 1 or span > CHART_MAX_POINTS:  # else `figures` is every turn already
            figures = list(Turn.objects.filter(ticket=ticket).order_by("number").values_list(*SERIES_FIELDS))
        drawn = [e for e in event_figures(ticket) if e.status in replacing]
        replay_changes = list(
            StateChange.objects.filter(ticket=ticket).only("to_version", "thread_turn", "after_tokens")
        )
    changes = audit_trail(ticket, limit=AUDIT_WINDOW + 1, before_version=audit_before)
    statuses = status_trail(ticket, limit=STATUS_WINDOW + 1, before=status_before)
    refused, refused_total = refused_for_page(ticket, window)
    refused_by_turn: dict[int, list[RefusedAttempt]] = {}
    unplaced: list[RefusedAttempt] = []
    for attempt, number in reversed(refused):
        if number in window:
            refused_by_turn.setdefault(number, []).append(attempt)
        elif not 1 <= number <= ticket.turn_count:
            unplaced.append(attempt)
    pins = pins_by_turn(state, turns=window, limit=PINS_PER_TURN)
    events_by_turn: dict[int, list[EventFigures]] = {}
    replaced: dict[int, EventFigures] = {}
    for event in on_window:
        if event.at_turn in window:
            events_by_turn.setdefault(event.at_turn, []).append(event)
        if event.status in replacing and event.first_replaced_turn and event.last_replaced_turn:
            for n in range(
                max(event.first_replaced_turn, window.first), min(event.last_replaced_turn, window.last) + 1
            ):
                replaced[n] = event
    timeline = []
    for t in turns:
        pinned_here = pins.get(t.number) or TurnPins()
        timeline.append(
            TimelineTurn(
                turn=t,
                replaced_by=replaced[t.number].number if t.number in replaced else None,
                replaced_at=replaced[t.number].at_turn if t.number in replaced else None,
                marks=pinned_here.marks,
                more_marks=pinned_here.more,
                categories=pinned_here.categories,
                events=events_by_turn.get(t.number, []),
                refused=refused_by_turn.get(t.number, []),
            )
        )
    read_savings = savings or ticket.turn_count <= SAVINGS_INLINE_TURNS
    return TicketPage(
        ticket=ticket,
        pinned=pinned,
        state=state,
        timeline=timeline,
        window=window,
        counts=counts,
        recent_compactions=recent,
        flagged_compactions=flagged,
        audit=trail_rows(
            changes[:AUDIT_WINDOW],
            ticket=ticket,
            has_older=len(changes) > AUDIT_WINDOW,
            before_version=audit_before,
        ),
        audit_older_than=changes[AUDIT_WINDOW - 1].to_version if len(changes) > AUDIT_WINDOW else None,
        series=context_series(
            ticket=ticket,
            turns=figures,
            events=drawn,
            changes=replay_changes,
            limit=CHART_MAX_POINTS,
            sample_of=span if sample is not None else None,
            compaction_count=counts.replacing,
            ticket_turns=ticket.turn_count,
        ),
        unplaced_refused=unplaced if not window.has_newer else [],
        refused=refused,
        refused_total=refused_total,
        status_changes=statuses[:STATUS_WINDOW],
        status_older_than=statuses[STATUS_WINDOW - 1].pk if len(statuses) > STATUS_WINDOW else None,
        savings=ticket_savings(ticket) if read_savings else None,
        savings_deferred=not read_savings and counts.replacing > 0,
        actions=action_list(state),
        state_json_inline=inline_state_json(state),
    )
