"""Reads of the ledger for the API and the pages: a constant number of queries each."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from ledger.models import LedgerEntry, LedgerResolution, Outcome, Reconciliation
from tickets.models import Ticket

LEDGER_COUNT_KEYS = ("matched", "unrecorded", "unconfirmed", "amount_differs")


def ticket_ledger_counts(ticket: Ticket) -> dict[str, int]:
    """The ticket's reconciliation outcomes by kind (one query): `matched` and the three mismatches still
    open, and `accepted`, the mismatches a supervisor accepted with a reason."""
    counts = Reconciliation.objects.filter(ticket=ticket).aggregate(
        **{
            key: Count(
                "pk", filter=Q(outcome=key) & (Q(accepted_at__isnull=True) | Q(outcome=Outcome.MATCHED))
            )
            for key in LEDGER_COUNT_KEYS
        },
        accepted=Count("pk", filter=Q(accepted_at__isnull=False) & ~Q(outcome=Outcome.MATCHED)),
    )
    return {key: int(value or 0) for key, value in counts.items()}


def ticket_outcomes(ticket: Ticket) -> QuerySet[Reconciliation]:
    """The ticket's outcomes with their entries, the open mismatches first."""
    return (
        Reconciliation.objects.filter(ticket=ticket)
        .select_related("entry", "accepted_by")
        .order_by("accepted_at", "outcome", "pk")
    )


def ticket_resolutions(ticket: Ticket) -> QuerySet[LedgerResolution]:
    return LedgerResolution.objects.filter(ticket=ticket).select_related("by")


def ticket_entries(ticket: Ticket) -> QuerySet[LedgerEntry]:
    return LedgerEntry.objects.filter(Q(ticket=ticket) | Q(ticket__isnull=True, order_id=ticket.order_id))


def open_mismatch_counts() -> dict[str, int]:
    """The open mismatches of every ticket by kind, and how many tickets have one (one query)."""
    counts = Reconciliation.objects.open_mismatches().aggregate(
        **{key: Count("pk", filter=Q(outcome=key)) for key in Outcome.mismatches()},
        tickets=Count("ticket", distinct=True),
    )
    return {key: int(value or 0) for key, value in counts.items()}
