"""The same ledger delivery arriving several times at once, on PostgreSQL: stored once, every answer a success."""

from __future__ import annotations

import pytest

from ledger.models import LedgerEntry, Reconciliation
from tests.ledger.conftest import entry, ingest, refund
from tests.tickets.test_concurrency import run_together
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
THREADS = 6


def test_concurrent_deliveries_of_one_entry_store_it_once() -> None:
    klass = TicketClass.objects.create(slug="c-8k", token_budget=8000, compaction_threshold=0.8)
    ticket: Ticket = open_ticket(
        ticket_id="T-1", order_id="SU-1", seller_type="marketplace", ticket_class=klass
    )
    refund(ticket, "k1")
    delivery = [entry("ev_1"), entry("ev_2", amount_cents=100)]

    outcomes = run_together(THREADS, lambda index: ingest(*delivery))
    assert [o for o in outcomes if isinstance(o, Exception)] == []
    assert sorted(len(o.created) for o in outcomes) == [0] * (THREADS - 1) + [2]
    assert LedgerEntry.objects.count() == 2
    assert sorted(Reconciliation.objects.values_list("outcome", flat=True)) == ["matched", "unrecorded"]
