"""Reads for the ticket page: the timeline window, the figures in force at each turn, the header's
compactions and refused attempts, and the pinned state with its audit trail.

Every figure is read from where it was stored when it happened: a turn's context size, budget and
threshold from the turn, a compaction's before and after from its event. A later change to the class
moves nothing that is already on the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Case, Count, F, IntegerField, Q, Subquery, Value, When
from django.http import Http404

from compaction.costs import costs_by_class
from compaction.models import CompactionEvent
from compaction.selectors import CompactionTotals, totals_of
from core.cost import CostSummary, summary_of
from core.vocabulary import CompactionStatus
from desk.pages.labels import PinnedMark, pinned_marks_by_turn
from desk.pages.ticket.live import Marks
from desk.pages.ticket.sampler import sampled_series_rows
from desk.pages.ticket.series import (
    CHART_MAX_POINTS,
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
)

# How much of a long ticket one page shows. The counts are the page's, not the database's: every read
# below is bounded by them (keyset on the turn number, the state version or the status change), so the
# page costs the same at 20 turns and at 5,000.
TIMELINE_WINDOW = 30  # turns
COMPACTIONS_SHOWN = 6  # compaction pills in the header: the newest, and as many of those worth a look
REFUSED_SHOWN = 5  # refused attempts listed in the header
REFUSED_READ = 100  # refused attempts read for one page at most: the header's, the window's and the unplaced


def get_ticket(ticket_id: str) -> Ticket:
    """The ticket with its class and pinned state, or 404."""
    try:
        return Ticket.objects.select_related("ticket_class", "pinned_state").get(ticket_id=ticket_id)
    except Ticket.DoesNotExist:
        raise Http404(f"no ticket {ticket_id}") from None


# What the chart reads of every turn, as plain rows: `values_list(*SERIES_FIELDS)` (rows, not model


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
    # Every compaction of the ticket, with the columns the cards, the chart and the markers read.
    compactions: list[EventFigures]
    audit: list[AuditRow | ReviewRow]
    series: ContextSeries
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
        return max(self.refused_total - len(self.recent_refused), 0)

    @property
    def status_choices(self) -> list[tuple[str, str]]:
        return list(TicketStatus.choices)

    @property
    def compaction_totals(self) -> CompactionTotals:
        """What compaction did and cost on this ticket, from the events already loaded."""
        return totals_of(self.compactions)

    @property
    def compaction_savings(self) -> CostSummary | None:
        """What the replacing compactions saved (tokens not re-sent at the working input price) and one
        compaction against one working turn (core.cost, one query); None before any replaced turns."""
        costs = costs_by_class(CompactionEvent.objects.filter(ticket=self.ticket))
        if not costs:
            return None
        [cost] = costs.values()
        return summary_of(cost.compactions, cost.prices)

    @property
    def live_marks(self) -> Marks:
        """How far this page has seen, for its live poll (`ticket_live`)."""
        return Marks(
            turn=self.ticket.turn_count,
            compaction=max((e.number for e in self.compactions), default=0),
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
) -> TicketPage:
    """Everything the ticket page shows, for the window of turns chosen by `timeline_window`: 7 queries
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
    refused, refused_total = refused_for_page(ticket, window)
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
            events=compactions,
            changes=replay_changes,
            limit=CHART_MAX_POINTS,
            sample_of=ticket.turn_count if sample is not None else None,
        ),
        unplaced_refused=unplaced if not window.has_newer else [],
        refused=refused,
        refused_total=refused_total,
        status_changes=statuses[:STATUS_WINDOW],
        status_older_than=statuses[STATUS_WINDOW - 1].pk if len(statuses) > STATUS_WINDOW else None,
    )
