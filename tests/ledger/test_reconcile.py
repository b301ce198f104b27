"""The reconciler's four outcomes, as stored for the ticket and counted by GET /api/v1/tickets/{id}/."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Outcome, Reconciliation
from ledger.selectors import ticket_ledger_counts
from ledger.services import reconcile_orders
from tests.ledger.conftest import entry, ingest, refund
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def outcomes(ticket: Ticket) -> list[tuple[str, str | None, str]]:
    return sorted(
        (r.outcome, r.entry.entry_id if r.entry else None, r.action_id)
        for r in Reconciliation.objects.filter(ticket=ticket).select_related("entry")
    )


def test_an_entry_with_the_settles_reference_matches_its_action_by_reference(ticket: Ticket) -> None:
    a1 = refund(ticket, "k1", external_ref="re_123")
    # Another refund of the same amount at the same time: only the reference tells them apart.
    refund(ticket, "k2", item="garden-chair")
    ingest(entry("ev_1", external_ref="re_123"))
    row = Reconciliation.objects.get(ticket=ticket, entry__entry_id="ev_1")
    assert (row.outcome, row.action_id, row.matched_by) == (Outcome.MATCHED, a1, "external_ref")


def test_an_entry_without_a_reference_matches_by_kind_amount_and_time(ticket: Ticket) -> None:
    a1 = refund(ticket, "k1")
    ingest(entry("ev_1"))
    assert outcomes(ticket) == [("matched", "ev_1", a1)]
    assert ticket_ledger_counts(ticket) == {
        "matched": 1,
        "unrecorded": 0,
        "unconfirmed": 0,
        "amount_differs": 0,
        "accepted": 0,
    }


def test_an_entry_outside_the_time_window_does_not_match(ticket: Ticket) -> None:
    a1 = refund(ticket, "k1")
    later = timezone.now() + timedelta(days=5)
    ingest(entry("ev_1", at=later), now=later)
    assert outcomes(ticket) == [("unconfirmed", None, a1), ("unrecorded", "ev_1", "")]


def test_money_the_ledger_moved_that_no_action_records_is_unrecorded(ticket: Ticket) -> None:
    ingest(entry("ev_9", amount_cents=2500))
    assert outcomes(ticket) == [("unrecorded", "ev_9", "")]
    row = Reconciliation.objects.get(ticket=ticket)
    assert "ev_9" in row.explanation and "2500 cents" in row.explanation and "no action" in row.explanation
    assert ticket_ledger_counts(ticket)["unrecorded"] == 1


def test_an_action_without_an_entry_is_unconfirmed_only_after_the_grace_period(ticket: Ticket) -> None:
    a1 = refund(ticket, "k1")
    reconcile_orders(order_ids=["SU-1"], now=timezone.now() + timedelta(minutes=5))
    assert outcomes(ticket) == []  # the ledger may simply be late
    reconcile_orders(order_ids=["SU-1"], now=timezone.now() + timedelta(hours=2))
    assert outcomes(ticket) == [("unconfirmed", None, a1)]
    assert ticket_ledger_counts(ticket)["unconfirmed"] == 1


def test_an_entry_whose_amount_differs_from_its_action_is_flagged(ticket: Ticket) -> None:
    a1 = refund(ticket, "k1", amount_cents=4000)
    ingest(entry("ev_1", amount_cents=4500))
    assert outcomes(ticket) == [("amount_differs", "ev_1", a1)]
    row = Reconciliation.objects.get(ticket=ticket)
    assert (row.entry_amount_cents, row.action_amount_cents) == (4500, 4000)
    assert ticket_ledger_counts(ticket)["amount_differs"] == 1


def test_an_exact_amount_is_preferred_to_a_nearer_differing_one(ticket: Ticket) -> None:
    a1 = refund(ticket, "k1", amount_cents=4000)
    a2 = refund(ticket, "k2", amount_cents=1500, item="garden-chair")
    ingest(entry("ev_1", amount_cents=1500), entry("ev_2", amount_cents=4000))
    assert outcomes(ticket) == [("matched", "ev_1", a2), ("matched", "ev_2", a1)]


def test_a_failed_or_intended_action_is_not_money_the_ledger_should_see(ticket: Ticket) -> None:
    from tickets.services.actions import record_action, settle_action

    intent = record_action(
        ticket=ticket,
        tool="issue_refund",
        idempotency_key="k1",
        item="x",
        amount_cents=4000,
        status="intended",
    )
    failed = record_action(
        ticket=ticket,
        tool="issue_refund",
        idempotency_key="k2",
        item="y",
        amount_cents=4000,
        status="intended",
    )
    settle_action(ticket=ticket, action_id=failed.action["id"], status="failed", reason="card declined")
    reconcile_orders(order_ids=["SU-1"], now=timezone.now() + timedelta(hours=2))
    assert outcomes(ticket) == []
    assert intent.action["status"] == "intended"


def test_an_entry_naming_the_order_goes_to_the_orders_ticket(ticket: Ticket) -> None:
    a1 = refund(ticket, "k1")
    ingest(entry("ev_1", order_id="SU-1"), entry("ev_2", order_id="SU-1", kind="charge", amount_cents=999))
    assert outcomes(ticket) == [("matched", "ev_1", a1), ("unrecorded", "ev_2", "")]


def test_reconciling_again_keeps_the_outcomes_it_finds_again(ticket: Ticket) -> None:
    ingest(entry("ev_9"))
    first = Reconciliation.objects.get(ticket=ticket)
    reconcile_orders(order_ids=["SU-1"])
    again = Reconciliation.objects.get(ticket=ticket)
    assert (again.pk, again.created_at) == (first.pk, first.created_at)


def test_the_ticket_api_carries_the_ledger_counts(ticket: Ticket, agent) -> None:
    refund(ticket, "k1")
    refund(ticket, "k2", item="garden-chair", amount_cents=1000)
    ingest(entry("ev_1"), entry("ev_2", kind="credit", amount_cents=700))
    reconcile_orders(order_ids=["SU-1"], now=timezone.now() + timedelta(hours=2))
    body = agent.get("/api/v1/tickets/T-1/").json()
    assert body["ledger"] == {
        "matched": 1,
        "unrecorded": 1,
        "unconfirmed": 1,
        "amount_differs": 0,
        "accepted": 0,
    }
