"""The queue row's stored figures of a ticket's compaction events (Ticket.compaction_count, has_coverage_miss,
has_failed, has_forced, has_no_safe_cut, needs_review, pending_deferral) and its refusals (has_refused).

The queue reads these columns instead of every event of every row. They are kept here, by one UPDATE of
the ticket row where an event is created or finishes (`ticket_figures_event_recorded`) and where one is
reviewed (`ticket_figures_reviewed`); `figures_from_events` is their definition from the events, used by the
backfill migration and by `ticket_figures_refresh` (a repair, and what the tests compare against).
"""

from __future__ import annotations

from typing import Any

from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from compaction.models import CompactionEvent, CompactionReview
from core.vocabulary import CompactionStatus
from tickets.models import RefusedAttempt, Ticket

# Statuses that make an event worth a supervisor's look (CompactionEventQuerySet.worth_review).
_WORTH_REVIEW = (CompactionStatus.FORCED, CompactionStatus.OVER_BUDGET, CompactionStatus.FAILED)


def _worth_review(coverage_missing_count: int, status: str) -> bool:
    return coverage_missing_count > 0 or status in _WORTH_REVIEW


def _needs_review(event_model: type[Model], review_model: type[Model], ticket: Any) -> Exists:
    """Some event of `ticket` (a value or OuterRef) is worth review and has no review."""
    events: QuerySet[Any] = event_model._default_manager.filter(ticket=ticket)
    return Exists(
        events.filter(Q(coverage_missing_count__gt=0) | Q(status__in=_WORTH_REVIEW)).exclude(
            Exists(review_model._default_manager.filter(event=OuterRef("pk")))
        )
    )


def figures_from_events(
    event_model: type[Model] = CompactionEvent,
    review_model: type[Model] = CompactionReview,
    refused_model: type[Model] = RefusedAttempt,
) -> dict[str, Any]:
    """Each stored figure as an expression over the ticket's events (OuterRef("pk") is the ticket).

    Takes the models so the backfill migration can pass its historical ones."""

    def events(**conditions: Any) -> QuerySet[Any]:
        return event_model._default_manager.filter(ticket=OuterRef("pk"), **conditions)

    replaced = (
        events(status__in=CompactionStatus.replacing()).order_by().values("ticket").annotate(n=Count("pk"))
    )
    # The newest event of the deferral's own ticket (OuterRef here is the event).
    newest = (
        event_model._default_manager.filter(ticket=OuterRef("ticket"))
        .order_by("-number")
        .values("number")[:1]
    )
    return {
        "compaction_count": Coalesce(Subquery(replaced.values("n"), output_field=IntegerField()), Value(0)),
        "has_coverage_miss": Exists(events(coverage_missing_count__gt=0)),
        "has_failed": Exists(events(status=CompactionStatus.FAILED)),
        "has_forced": Exists(events(status=CompactionStatus.FORCED)),
        "has_no_safe_cut": Exists(events(status=CompactionStatus.OVER_BUDGET)),
        "needs_review": _needs_review(event_model, review_model, OuterRef("pk")),
        "has_refused": Exists(refused_model._default_manager.filter(ticket=OuterRef("pk"))),
        "pending_deferral": Exists(events(status=CompactionStatus.DEFERRED, number=Subquery(newest))),
    }


def ticket_figures_refresh(*, tickets: QuerySet[Ticket]) -> int:
    """Store every figure of `tickets` anew from their events (one UPDATE); the number of tickets."""
    return tickets.update(**figures_from_events())


def ticket_figures_event_recorded(*, event: CompactionEvent) -> None:
    """Keep the ticket's figures after `event` was created or finished: one UPDATE of the ticket row, flat
    in the number of events (the flags only turn on here; a review turns needs_review off)."""
    status = str(event.status)
    changes: dict[str, Any] = {
        # The newest event of the ticket is a deferral: one probe of (ticket, number).
        "pending_deferral": Exists(
            CompactionEvent.objects.filter(
                pk=Subquery(
                    CompactionEvent.objects.filter(ticket=event.ticket_id)
                    .order_by("-number")
                    .values("pk")[:1]
                ),
                status=CompactionStatus.DEFERRED,
            )
        )
    }
    if event.coverage_missing_count > 0:
        changes["has_coverage_miss"] = True
    if status == CompactionStatus.FAILED:
        changes["has_failed"] = True
    if status == CompactionStatus.FORCED:
        changes["has_forced"] = True
    if status == CompactionStatus.OVER_BUDGET:
        changes["has_no_safe_cut"] = True
    if _worth_review(event.coverage_missing_count, status):
        # Unless it was reviewed already (a review may come while the summarizer runs).
        changes["needs_review"] = ExpressionWrapper(
            Q(needs_review=True) | ~Exists(CompactionReview.objects.filter(event=event.pk)),
            output_field=BooleanField(),
        )
    if status in CompactionStatus.replacing():
        # An event replaces turns once: its run applies it under the ticket's lock, after checking the run is its own.
        changes["compaction_count"] = F("compaction_count") + 1
    Ticket.objects.filter(pk=event.ticket_id).update(**changes)


def ticket_figures_reviewed(*, ticket_id: int) -> None:
    """Keep needs_review after a review: it stays on while another event worth review has none."""
    Ticket.objects.filter(pk=ticket_id).update(
        needs_review=_needs_review(CompactionEvent, CompactionReview, ticket_id)
    )
