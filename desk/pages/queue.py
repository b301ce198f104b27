"""The queue's read: tickets with their class, pinned state, compaction count and flags, one query a page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce, Now

from compaction.models import CompactionEvent, CompactionStatus
from tickets.models import RefusedAttempt, Ticket, TicketClass
from tickets.state import StateItems

QUEUE_PAGE_SIZE = 50


class QueueFlag:
    NEEDS_REVIEW = "needs_review"
    COVERAGE_MISS = "coverage_miss"
    FORCED = "forced"
    FAILED = "failed"
    OVER_BUDGET = "over_budget"
    REFUSED = "refused_repeats"
    STALE_INTENTS = "stale_intents"

    choices = (
        (NEEDS_REVIEW, "Unreviewed"),
        (COVERAGE_MISS, "Coverage misses"),
        (FORCED, "Forced or no safe cut"),
        (FAILED, "Failed compactions"),
        (OVER_BUDGET, "Over budget now"),
        (REFUSED, "Refused repeats"),
        (STALE_INTENTS, "Open intents past their timeout"),
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
    replaced_count = (
        _events(status__in=CompactionStatus.replacing())
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
            "intent_stale_at",
        )
        .annotate(
            compaction_count=Coalesce(Subquery(replaced_count, output_field=IntegerField()), Value(0)),
            has_coverage_miss=Exists(_events(coverage_missing_count__gt=0)),
            has_failed=Exists(_events(status=CompactionStatus.FAILED)),
            has_forced=Exists(_events(status=CompactionStatus.FORCED)),
            has_no_safe_cut=Exists(_events(status=CompactionStatus.OVER_BUDGET)),
            needs_review=Exists(
                CompactionEvent.objects.filter(ticket=OuterRef("pk")).worth_review().unreviewed()
            ),
            has_refused=Exists(RefusedAttempt.objects.filter(ticket=OuterRef("pk"))),
            has_stale_intent=ExpressionWrapper(Q(intent_stale_at__lte=Now()), output_field=BooleanField()),
            # The newest event is a deferral: compaction is due and waits for the next boundary.
            pending_deferral=Exists(
                _events(status=CompactionStatus.DEFERRED).filter(
                    number=Subquery(_events().order_by("-number").values("number")[:1])
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
    if QueueFlag.NEEDS_REVIEW in filters.flags:
        tickets = tickets.filter(needs_review=True)
    if QueueFlag.COVERAGE_MISS in filters.flags:
        tickets = tickets.filter(has_coverage_miss=True)
    if QueueFlag.FORCED in filters.flags:
        tickets = tickets.filter(Q(has_forced=True) | Q(has_no_safe_cut=True))
    if QueueFlag.FAILED in filters.flags:
        tickets = tickets.filter(has_failed=True)
    if QueueFlag.OVER_BUDGET in filters.flags:
        # Over the budget now, not once: a ticket compacted back under it is not flagged.
        tickets = tickets.filter(context_tokens__gt=F("ticket_class__token_budget"))
    if QueueFlag.REFUSED in filters.flags:
        # The annotations carry the conditions of Ticket.objects.with_refused_attempts() and
        # with_stale_intents(); filtering on them keeps the page one query with its flags.
        tickets = tickets.filter(has_refused=True)
    if QueueFlag.STALE_INTENTS in filters.flags:
        tickets = tickets.filter(has_stale_intent=True)
    return tickets.order_by(QUEUE_SORTS.get(filters.sort, "-pk"))


def ticket_classes() -> QuerySet[TicketClass]:
    return TicketClass.objects.order_by("slug")


def refunded_cents(ticket: Ticket) -> int:
    """The derived refund total of a ticket whose pinned state was selected with it."""
    return StateItems.model_validate(ticket.pinned_state.data).refunded_cents_total
