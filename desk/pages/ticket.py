"""Reads for the ticket page: the timeline, the figures in force at each turn, the pinned state with
its audit trail as diffs, and the ticket's JSON export.

Every figure is read from where it was stored when it happened: a turn's context size, budget and
threshold from the turn, a compaction's before and after from its event. A later change to the class
moves nothing that is already on the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from django.http import Http404

from compaction.models import CompactionEvent, CompactionStatus
from compaction.selectors import CompactionTotals, totals_of
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
from tickets.tokens import REPLY_PRIMING_TOKENS


def get_ticket(ticket_id: str) -> Ticket:
    """The ticket with its class and pinned state, or 404."""
    try:
        return Ticket.objects.select_related("ticket_class", "pinned_state").get(ticket_id=ticket_id)
    except Ticket.DoesNotExist:
        raise Http404(f"no ticket {ticket_id}") from None


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
    compaction: CompactionEvent | None = None
    replayed: bool = False  # a turn stored before turns kept their figures: replayed from stored counts


@dataclass(frozen=True)
class ContextSeries:
    points: list[ContextPoint]

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
    *, ticket: Ticket, turns: list[Turn], events: list[CompactionEvent], changes: list[StateChange]
) -> dict[int, int]:
    """Per-turn request size replayed from stored counts, for turns stored without their figure.

    For turn n: system prompt + the pinned state as of n + the summary active before n + the turns
    after the ones it replaced, up to n, + the reply priming (as migration 0006b fills them).
    """
    tokens_by_number = {t.number: t.tokens for t in turns}
    last = max(tokens_by_number, default=0)
    prefix = [0, *accumulate(tokens_by_number.get(n, 0) for n in range(1, last + 1))]
    ordered_changes = sorted(changes, key=lambda c: c.to_version)
    replacing = sorted(
        (e for e in events if e.status in CompactionStatus.replacing() and e.last_replaced_turn),
        key=lambda e: e.at_turn,
    )
    sizes: dict[int, int] = {}
    change_index = event_index = state_tokens = 0
    active: CompactionEvent | None = None
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
        sizes[n] = ticket.system_prompt_tokens + state_tokens + summary + turn_tokens + REPLY_PRIMING_TOKENS
    return sizes


def context_series(
    *, ticket: Ticket, turns: list[Turn], events: list[CompactionEvent], changes: list[StateChange]
) -> ContextSeries:
    """Per-turn context size with the budget and threshold in force, from what each turn stored."""
    ticket_class = ticket.ticket_class
    replacing = {e.at_turn: e for e in events if e.status in CompactionStatus.replacing()}
    legacy = [t for t in turns if not t.token_budget]
    replayed = _replayed_sizes(ticket=ticket, turns=turns, events=events, changes=changes) if legacy else {}
    points = []
    for t in turns:
        stored = bool(t.token_budget)
        points.append(
            ContextPoint(
                turn=t.number,
                tokens=t.context_tokens if stored and t.context_tokens else replayed.get(t.number, 0),
                threshold_tokens=t.threshold_tokens if stored else ticket_class.threshold_tokens,
                token_budget=t.token_budget if stored else ticket_class.token_budget,
                compaction=replacing.get(t.number),
                replayed=not stored,
            )
        )
    return ContextSeries(points=points)


@dataclass
class TimelineTurn:
    turn: Turn
    replaced_by: int | None = None
    marks: list[PinnedMark] = field(default_factory=list)
    events: list[CompactionEvent] = field(default_factory=list)
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
    compactions: list[CompactionEvent]
    audit: list[AuditRow]
    series: ContextSeries
    # Refused attempts whose turn is not on the timeline (none recorded, or past the stored turns).
    unplaced_refused: list[RefusedAttempt] = field(default_factory=list)
    status_changes: list[TicketStatusChange] = field(default_factory=list)

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


def audit_trail(ticket: Ticket) -> list[StateChange]:
    """The ticket's state changes with their actor, newest first."""
    return list(StateChange.objects.filter(ticket=ticket).select_related("actor").order_by("-to_version"))


def status_trail(ticket: Ticket) -> list[TicketStatusChange]:
    """The ticket's status changes with their actor, newest first."""
    return list(
        TicketStatusChange.objects.filter(ticket=ticket)
        .select_related("actor")
        .order_by("-created_at", "-pk")
    )


def ticket_page(ticket: Ticket) -> TicketPage:
    """Everything the ticket page shows: 5 queries after the ticket itself, whatever its length."""
    pinned = ticket.pinned_state
    state = pinned.agent_json()
    turns = list(Turn.objects.filter(ticket=ticket).order_by("number"))
    compactions = list(
        CompactionEvent.objects.filter(ticket=ticket).defer("summary", "validation_errors").order_by("number")
    )
    changes = audit_trail(ticket)
    refused_by_turn: dict[int, list[RefusedAttempt]] = {}
    for attempt in RefusedAttempt.objects.filter(ticket=ticket).defer("request").order_by("created_at", "pk"):
        refused_by_turn.setdefault(refused_turn(attempt), []).append(attempt)
    marks = pinned_marks_by_turn(state)
    events_by_turn: dict[int, list[CompactionEvent]] = {}
    replaced: dict[int, int] = {}
    for event in compactions:
        events_by_turn.setdefault(event.at_turn, []).append(event)
        if (
            event.status in CompactionStatus.replacing()
            and event.first_replaced_turn
            and event.last_replaced_turn
        ):
            for n in range(event.first_replaced_turn, event.last_replaced_turn + 1):
                replaced[n] = event.number
    timeline = [
        TimelineTurn(
            turn=t,
            replaced_by=replaced.get(t.number),
            marks=marks.get(t.number, []),
            events=events_by_turn.get(t.number, []),
            refused=refused_by_turn.pop(t.number, []),
        )
        for t in turns
    ]
    return TicketPage(
        ticket=ticket,
        pinned=pinned,
        state=state,
        timeline=timeline,
        compactions=compactions,
        audit=audit_rows(changes),
        series=context_series(ticket=ticket, turns=turns, events=compactions, changes=changes),
        unplaced_refused=[a for turn in sorted(refused_by_turn) for a in refused_by_turn[turn]],
        status_changes=status_trail(ticket),
    )


@dataclass(frozen=True)
class StatePanel:
    """What a correction changes on the ticket page: the state panel and the header cards beside it."""

    ticket: Ticket
    state: dict[str, Any]
    audit: list[AuditRow]


def state_panel(ticket: Ticket) -> StatePanel:
    """The pinned state, the audit trail and the ticket's current figures, read after a correction."""
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)
    return StatePanel(ticket=pinned.ticket, state=pinned.agent_json(), audit=audit_rows(audit_trail(ticket)))


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
