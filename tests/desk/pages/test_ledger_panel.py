"""The ledger's resolution form on the ticket page: supervisors only, a reason required, errors shown."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger.models import LedgerResolution, Reconciliation
from tests.browser.desk_data import agent as agent_user
from tests.browser.desk_data import supervisor
from tests.ledger.conftest import entry, ingest
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def test_the_panel_explains_the_mismatch_and_a_resolution_needs_a_reason(
    client: Client, ticket: Ticket
) -> None:
    ingest(entry("ev_9", amount_cents=2500))
    row = Reconciliation.objects.get()
    client.force_login(supervisor())
    html = client.get("/tickets/T-1/").content.decode()
    assert 'id="ledger"' in html and "ev_9" in html and "Money moved, no action recorded" in html
    url = f"/tickets/T-1/ledger/{row.pk}/resolve/"
    response = client.post(url, {"resolution": "accepted", "reason": " "}, follow=True)
    assert "Not resolved: reason: This field is required." in response.content.decode()
    response = client.post(url, {"resolution": "marked_failed", "reason": "why"}, follow=True)
    assert (
        "Not resolved: only an action the ledger never saw can be marked failed" in response.content.decode()
    )
    assert not LedgerResolution.objects.exists()
    response = client.post(url, {"resolution": "accepted", "reason": "a test charge by finance"}, follow=True)
    assert "Ledger mismatch resolved." in response.content.decode()
    assert "Accepted by sam" in response.content.decode()


def test_an_agent_account_cannot_resolve(client: Client, ticket: Ticket) -> None:
    ingest(entry("ev_9"))
    row = Reconciliation.objects.get()
    client.force_login(agent_user())
    response = client.post(
        f"/tickets/T-1/ledger/{row.pk}/resolve/", {"resolution": "accepted", "reason": "x"}
    )
    assert response.status_code == 403
    assert not LedgerResolution.objects.exists()


def test_the_queue_flags_and_filters_ledger_mismatches(
    client: Client, ticket: Ticket, standard_class
) -> None:
    from tickets.services.lifecycle import open_ticket

    open_ticket(ticket_id="T-2", order_id="SU-2", seller_type="marketplace", ticket_class=standard_class)
    ingest(entry("ev_9"))
    client.force_login(supervisor())
    html = client.get("/?flags=ledger_mismatch").content.decode()
    assert "T-1" in html and "T-2" not in html and "ledger: unrecorded money" in html
    metrics = client.get("/metrics/").content.decode()
    assert 'id="ledger-mismatches"' in metrics and "1 unrecorded" in metrics
