"""Reads for the supervisors' pages: one selector per page, each a constant number of queries.

Nothing here tokenizes: every size is a sum of counts stored when the turn, the state or the summary
was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from itertools import accumulate
from typing import Any

from django.db.models import Avg, Count, Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.http import Http404

from compaction.context import AssembledContext
from compaction.coverage import action_covered, text_covered
from compaction.models import CompactionEvent, CompactionStatus, ContextSnapshot
from compaction.selectors import CompactionTotals, assemble_context, totals_of
from tickets.models import PinnedState, StateChange, Ticket, TicketClass, TicketStatus, Turn
from tickets.state import StateItems
from tickets.tokens import REPLY_PRIMING_TOKENS

QUEUE_PAGE_SIZE = 50

# The four categories a summary must preserve, in the order the pages show them.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("decisions", "Decisions"),
    ("actions_taken", "Actions taken"),
    ("customer_constraints", "Customer constraints"),
    ("open_questions", "Open questions"),
)
CATEGORY_LABELS = dict(CATEGORIES)


# --- the queue -------------------------------------------------------------------------------


class QueueFlag:
    COVERAGE_MISS = "coverage_miss"
    FAILED = "failed"
    DEFERRED_OVER_BUDGET = "deferred_over_budget"

    choices = (
        (COVERAGE_MISS, "Coverage misses"),
        (FAILED, "Failed compactions"),
        (DEFERRED_OVER_BUDGET, "Deferred, over budget"),
    )


@dataclass(frozen=True)
class QueueFilters:
    q: str = ""
    ticket_class: str = ""
    status: str = ""
    flags: tuple[str, ...] = ()
    sort: str = "recent"


QUEUE_SORTS = {"recent": "-pk", "tokens": "-context_tokens", "turns": "-turn_count"}


def _events(**conditions: Any) -> QuerySet[CompactionEvent]:
    return CompactionEvent.objects.filter(ticket=OuterRef("pk"), **conditions)


def queue_tickets(filters: QueueFilters) -> QuerySet[Ticket]:
    """Tickets for the queue, with their class, pinned state, compaction count and flags.

    Counts and flags are correlated subqueries, so the database evaluates them only for the rows of
    the page; the search uses the unique ticket id and the indexed order id. The default order is
    the primary key (newest first): it is indexed, unlike `updated_at` on its own.
    """
    applied_count = (
        _events(status=CompactionStatus.APPLIED)
        .order_by()
        .values("ticket")
        .annotate(n=Count("pk"))
        .values("n")
    )
    tickets = (
        Ticket.objects.select_related("ticket_class", "pinned_state")
        .only(
            "ticket_id",
            "order_id",
            "seller_type",
            "status",
            "context_tokens",
            "turn_count",
            "updated_at",
            "ticket_class__slug",
            "ticket_class__token_budget",
            "ticket_class__compaction_threshold",
            "pinned_state__data",
            "pinned_state__version",
        )
        .annotate(
            compaction_count=Coalesce(Subquery(applied_count, output_field=IntegerField()), Value(0)),
            has_coverage_miss=Exists(_events(coverage_missing_count__gt=0)),
            has_failed=Exists(_events(status=CompactionStatus.FAILED)),
            # The newest event is a deferral: compaction is due and waits for the next boundary.
            pending_deferral=Exists(
                _events(status=CompactionStatus.DEFERRED).filter(
                    number=Subquery(_events().order_by("-number").values("number")[:1])
                )
            ),
            deferred_over_budget=Exists(
                _events(
                    status=CompactionStatus.DEFERRED, tokens_before__gt=OuterRef("ticket_class__token_budget")
                )
            ),
        )
    )
    q = filters.q.strip()
    if q:
        # A prefix as a range keeps both lookups on their indexes (LIKE would scan on SQLite).
        wanted = q.upper()
        after = wanted + "\uffff"
        tickets = tickets.filter(
            Q(ticket_id__gte=wanted, ticket_id__lt=after) | Q(order_id__gte=wanted, order_id__lt=after)
        )
    if filters.ticket_class:
        tickets = tickets.filter(ticket_class__slug=filters.ticket_class)
    if filters.status:
        tickets = tickets.filter(status=filters.status)
    if QueueFlag.COVERAGE_MISS in filters.flags:
        tickets = tickets.filter(has_coverage_miss=True)
    if QueueFlag.FAILED in filters.flags:
        tickets = tickets.filter(has_failed=True)
    if QueueFlag.DEFERRED_OVER_BUDGET in filters.flags:
        tickets = tickets.filter(
            Q(deferred_over_budget=True)
            | Q(pending_deferral=True, context_tokens__gt=F("ticket_class__token_budget"))
        )
    return tickets.order_by(QUEUE_SORTS.get(filters.sort, "-pk"))


def ticket_classes() -> QuerySet[TicketClass]:
    return TicketClass.objects.order_by("slug")


def refunded_cents(ticket: Ticket) -> int:
    """The derived refund total of a ticket whose pinned state was selected with it."""
    return StateItems.model_validate(ticket.pinned_state.data).refunded_cents_total


# --- access-checked fetch -----------------------------------------------------------------------


def get_ticket(ticket_id: str) -> Ticket:
    """The ticket with its class and pinned state, or 404."""
    try:
        return Ticket.objects.select_related("ticket_class", "pinned_state").get(ticket_id=ticket_id)
    except Ticket.DoesNotExist:
        raise Http404(f"no ticket {ticket_id}") from None


# --- the ticket page ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextPoint:
    """The assembled request right after turn `turn` was stored.

    `before` is the size before any compaction that turn triggered; `after` the size the agent was
    given for its next step (equal to `before` unless a compaction was applied on this turn).
    """

    turn: int
    before: int
    after: int
    compaction_number: int | None = None


@dataclass(frozen=True)
class ContextSeries:
    points: list[ContextPoint]
    threshold_tokens: int
    token_budget: int

    @property
    def peak(self) -> int:
        return max((p.before for p in self.points), default=0)


def context_series(
    *, ticket: Ticket, turns: list[Turn], events: list[CompactionEvent], changes: list[StateChange]
) -> ContextSeries:
    """Per-turn assembled-context size from stored counts and compaction events (no tokenizing).

    For turn n: system prompt + the pinned state as of n (the last audit row with thread_turn <= n)
    + the summary active after n + the turns after the last applied compaction, up to n, + the
    reply priming. It matches `compaction.selectors.assemble_context(ticket, through_turn=n)`.
    """
    ticket_class = ticket.ticket_class
    tokens_by_number = {t.number: t.tokens for t in turns}
    last = max(tokens_by_number, default=0)
    prefix = [0, *accumulate(tokens_by_number.get(n, 0) for n in range(1, last + 1))]
    ordered_changes = sorted(changes, key=lambda c: c.to_version)
    applied = sorted(
        (e for e in events if e.status == CompactionStatus.APPLIED and e.last_replaced_turn is not None),
        key=lambda e: e.at_turn,
    )
    fixed = ticket.system_prompt_tokens + REPLY_PRIMING_TOKENS

    def size(n: int, state_tokens: int, event: CompactionEvent | None) -> int:
        first_active = (event.last_replaced_turn or 0) + 1 if event else 1
        turn_tokens = prefix[n] - prefix[first_active - 1] if first_active <= n else 0
        return fixed + state_tokens + (event.summary_tokens if event else 0) + turn_tokens

    points: list[ContextPoint] = []
    change_index = 0
    state_tokens = 0
    active: CompactionEvent | None = None
    event_index = 0
    for n in range(1, last + 1):
        while change_index < len(ordered_changes) and ordered_changes[change_index].thread_turn <= n:
            state_tokens = ordered_changes[change_index].after_tokens
            change_index += 1
        before = size(n, state_tokens, active)
        number = None
        while event_index < len(applied) and applied[event_index].at_turn <= n:
            active = applied[event_index]
            number = active.number
            event_index += 1
        points.append(
            ContextPoint(turn=n, before=before, after=size(n, state_tokens, active), compaction_number=number)
        )
    return ContextSeries(
        points=points, threshold_tokens=ticket_class.threshold_tokens, token_budget=ticket_class.token_budget
    )


@dataclass(frozen=True)
class PinnedMark:
    """A pinned item shown against the turn it came from."""

    category: str
    id: str
    label: str


@dataclass
class TimelineTurn:
    turn: Turn
    replaced_by: int | None = None
    marks: list[PinnedMark] = field(default_factory=list)
    events: list[CompactionEvent] = field(default_factory=list)


def _item_label(category: str, item: dict[str, Any]) -> str:
    if category == "actions_taken":
        parts = [item.get("tool", "")]
        if item.get("amount_cents"):
            parts.append(f"${item['amount_cents'] / 100:,.2f}")
        if item.get("item"):
            parts.append(item["item"])
        if item.get("reversed"):
            parts.append("(reversed)")
        return " ".join(p for p in parts if p)
    return str(item.get("text", ""))


def pinned_marks_by_turn(state_json: dict[str, Any]) -> dict[int, list[PinnedMark]]:
    """Each pinned item of the four categories, keyed by the turn it came from."""
    marks: dict[int, list[PinnedMark]] = {}
    for category, _label in CATEGORIES:
        for item in state_json.get(category, []):
            at_turn = item.get("at_turn")
            if at_turn:
                marks.setdefault(int(at_turn), []).append(
                    PinnedMark(
                        category=category, id=str(item.get("id", "")), label=_item_label(category, item)
                    )
                )
    return marks


@dataclass(frozen=True)
class TicketPage:
    ticket: Ticket
    pinned: PinnedState
    state: dict[str, Any]
    timeline: list[TimelineTurn]
    compactions: list[CompactionEvent]
    changes: list[StateChange]
    series: ContextSeries

    @property
    def applied_compactions(self) -> list[CompactionEvent]:
        return [e for e in self.compactions if e.status == CompactionStatus.APPLIED]

    @property
    def status_choices(self) -> list[tuple[str, str]]:
        return list(TicketStatus.choices)

    @property
    def compaction_totals(self) -> CompactionTotals:
        """What compaction did and cost on this ticket, from the events already loaded."""
        return totals_of(self.compactions)


def audit_trail(ticket: Ticket) -> list[StateChange]:
    """The ticket's state changes with their actor, newest first, without the before/after documents."""
    return list(
        StateChange.objects.filter(ticket=ticket)
        .select_related("actor")
        .defer("before", "after")
        .order_by("-to_version")
    )


def ticket_page(ticket: Ticket) -> TicketPage:
    """Everything the ticket page shows: 3 queries after the ticket itself, whatever its length."""
    pinned = ticket.pinned_state
    state = pinned.agent_json()
    turns = list(Turn.objects.filter(ticket=ticket).order_by("number"))
    compactions = list(
        CompactionEvent.objects.filter(ticket=ticket).defer("summary", "validation_errors").order_by("number")
    )
    changes = audit_trail(ticket)
    marks = pinned_marks_by_turn(state)
    events_by_turn: dict[int, list[CompactionEvent]] = {}
    for event in compactions:
        events_by_turn.setdefault(event.at_turn, []).append(event)
    replaced: dict[int, int] = {}
    for event in compactions:
        if (
            event.status == CompactionStatus.APPLIED
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
        )
        for t in turns
    ]
    series = context_series(ticket=ticket, turns=turns, events=compactions, changes=changes)
    return TicketPage(
        ticket=ticket,
        pinned=pinned,
        state=state,
        timeline=timeline,
        compactions=compactions,
        changes=changes,
        series=series,
    )


def state_panel(ticket: Ticket) -> tuple[dict[str, Any], list[StateChange]]:
    """The pinned state (agent-facing JSON) and the audit trail: what the correction fragment shows."""
    pinned = PinnedState.objects.select_related("ticket").get(ticket=ticket)
    return pinned.agent_json(), audit_trail(ticket)


def changes_since(ticket: Ticket, version: int) -> list[StateChange]:
    """Changes made after `version`: what a stale editor did not see."""
    return list(
        StateChange.objects.filter(ticket=ticket, from_version__gte=version)
        .select_related("actor")
        .defer("before", "after")
        .order_by("to_version")
    )


# --- compaction review -------------------------------------------------------------------------


@dataclass
class ReviewMessage:
    role: str
    content: str
    turn: int | None
    tool: str
    marks: list[PinnedMark]
    replaced: bool


@dataclass
class SummaryEntry:
    text: str
    covers: list[str]


@dataclass
class CoverageItem:
    id: str
    label: str
    at_turn: int | None
    covered: bool


@dataclass
class ReviewCategory:
    key: str
    label: str
    entries: list[SummaryEntry]
    items: list[CoverageItem]

    @property
    def missing(self) -> list[CoverageItem]:
        return [i for i in self.items if not i.covered]


@dataclass(frozen=True)
class CompactionReview:
    event: CompactionEvent
    snapshot: ContextSnapshot | None
    messages: list[ReviewMessage]
    categories: list[ReviewCategory]
    narrative: str
    siblings: list[CompactionEvent]

    @property
    def missing_count(self) -> int:
        return sum(len(c.missing) for c in self.categories)


def _entry_covers(category: str, entry: str, items: list[dict[str, Any]]) -> list[str]:
    covers = []
    for item in items:
        if category == "actions_taken":
            hit = action_covered(item, [entry])
        else:
            hit = text_covered(str(item.get("text", "")), [entry])
        if hit:
            covers.append(str(item.get("id", "")))
    return covers


def compaction_review(ticket: Ticket, number: int) -> CompactionReview:
    """Both sides of one compaction, with each pinned item tied to its turn (left) and its summary
    field (right). Coverage is the report stored on the event when it was written."""
    try:
        event = CompactionEvent.objects.select_related("snapshot").get(ticket=ticket, number=number)
    except CompactionEvent.DoesNotExist:
        raise Http404(f"{ticket.ticket_id} has no compaction {number}") from None
    snapshot: ContextSnapshot | None = getattr(event, "snapshot", None)
    siblings = list(
        CompactionEvent.objects.filter(ticket=ticket).only("number", "status", "at_turn").order_by("number")
    )
    state_json: dict[str, Any] = snapshot.pinned_state if snapshot else {}
    summary: dict[str, Any] = (snapshot.summary if snapshot else None) or event.summary or {}
    marks = pinned_marks_by_turn(state_json)
    first, last = event.first_replaced_turn, event.last_replaced_turn
    messages = [
        ReviewMessage(
            role=m.get("role", ""),
            content=m.get("content", ""),
            turn=m.get("turn"),
            tool=m.get("tool", ""),
            marks=marks.get(m["turn"], []) if m.get("turn") else [],
            replaced=bool(first and last and m.get("turn") and first <= m["turn"] <= last),
        )
        for m in (snapshot.messages if snapshot else [])
    ]
    coverage = event.coverage or {}
    covered_ids = {(c["category"], c["id"]) for c in coverage.get("covered", [])}
    categories = []
    for key, label in CATEGORIES:
        items = state_json.get(key, [])
        entries = [SummaryEntry(text=e, covers=_entry_covers(key, e, items)) for e in summary.get(key, [])]
        coverage_items = []
        for item in items:
            item_id = str(item.get("id", ""))
            covered = (key, item_id) in covered_ids
            coverage_items.append(
                CoverageItem(
                    id=item_id,
                    label=_item_label(key, item),
                    at_turn=item.get("at_turn"),
                    covered=covered if summary else False,
                )
            )
        categories.append(ReviewCategory(key=key, label=label, entries=entries, items=coverage_items))
    return CompactionReview(
        event=event,
        snapshot=snapshot,
        messages=messages,
        categories=categories,
        narrative=str(summary.get("narrative", "")),
        siblings=siblings,
    )


# --- replay ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replay:
    turn: int
    context: AssembledContext
    messages: list[dict[str, Any]]
    active_compaction: int | None


def replay(ticket: Ticket, turn: int) -> Replay:
    """The exact request the agent was given right after turn `turn` (the state, summary and turns then)."""
    context = assemble_context(ticket, through_turn=turn)
    active = (
        CompactionEvent.objects.filter(ticket=ticket, at_turn__lte=turn)
        .applied()
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )
    return Replay(turn=turn, context=context, messages=context.messages(), active_compaction=active)


# --- metrics and classes -------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassMetrics:
    slug: str
    applied: int
    failed: int
    deferred: int
    tokens_saved: int
    cost_usd: Decimal
    avg_latency_ms: float | None
    coverage_misses: int

    @property
    def failure_rate(self) -> float | None:
        attempted = self.applied + self.failed
        return self.failed / attempted if attempted else None

    @property
    def failure_percent(self) -> float | None:
        rate = self.failure_rate
        return None if rate is None else round(100 * rate, 1)


def compaction_metrics() -> list[ClassMetrics]:
    """Per ticket class, every class listed: compactions by status, tokens saved, summarizer cost,
    latency (one query)."""
    event = "tickets__compactions__"
    applied = Q(**{f"{event}status": CompactionStatus.APPLIED})
    rows = (
        TicketClass.objects.order_by("slug")
        .values("slug")
        .annotate(
            applied=Count(f"{event}pk", filter=applied),
            failed=Count(f"{event}pk", filter=Q(**{f"{event}status": CompactionStatus.FAILED})),
            deferred=Count(f"{event}pk", filter=Q(**{f"{event}status": CompactionStatus.DEFERRED})),
            saved=Coalesce(
                Sum(F(f"{event}tokens_before") - F(f"{event}tokens_after"), filter=applied), Value(0)
            ),
            cost=Coalesce(Sum(f"{event}cost_usd"), Value(Decimal("0"))),
            latency=Avg(f"{event}latency_ms", filter=~Q(**{f"{event}status": CompactionStatus.DEFERRED})),
            misses=Count(f"{event}pk", filter=Q(**{f"{event}coverage_missing_count__gt": 0})),
        )
    )
    return [
        ClassMetrics(
            slug=r["slug"],
            applied=r["applied"],
            failed=r["failed"],
            deferred=r["deferred"],
            tokens_saved=int(r["saved"] or 0),
            cost_usd=Decimal(r["cost"] or 0),
            avg_latency_ms=r["latency"],
            coverage_misses=r["misses"],
        )
        for r in rows
    ]


def class_table() -> QuerySet[TicketClass]:
    """Budgets per class, with how many tickets each holds (one query)."""
    return TicketClass.objects.annotate(ticket_count=Count("tickets")).order_by("slug")
