"""A settle carries the payment system's reference; the reconciler matches on it."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from ledger.models import Reconciliation
from tests.ledger.conftest import entry, ingest
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def test_the_settle_patch_stores_external_ref_and_the_entry_matches_it(
    agent: APIClient, ticket: Ticket
) -> None:
    reserved = agent.post(
        "/api/v1/tickets/T-1/actions/",
        {"tool": "issue_refund", "item": "garden-table", "amount_cents": 4000, "status": "intended"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )
    assert reserved.status_code == 201
    assert "external_ref" not in reserved.json()["action"]  # absent until a settle carries one
    settled = agent.patch(
        "/api/v1/tickets/T-1/actions/A1/", {"status": "succeeded", "external_ref": "re_3PxQ"}, format="json"
    )
    assert settled.status_code == 200, settled.content
    assert settled.json()["action"]["external_ref"] == "re_3PxQ"
    assert agent.get("/api/v1/tickets/T-1/state/").json()["actions_taken"][0]["external_ref"] == "re_3PxQ"
    # A different amount at the same time would not match by window; the reference makes it amount_differs.
    ingest(entry("ev_1", external_ref="re_3PxQ", amount_cents=3000))
    row = Reconciliation.objects.get()
    assert (row.outcome, row.action_id, row.matched_by) == ("amount_differs", "A1", "external_ref")


def test_external_ref_is_validated(agent: APIClient, ticket: Ticket) -> None:
    agent.post(
        "/api/v1/tickets/T-1/actions/",
        {"tool": "issue_refund", "item": "x", "amount_cents": 1, "status": "intended"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )
    response = agent.patch(
        "/api/v1/tickets/T-1/actions/A1/", {"status": "succeeded", "external_ref": "r" * 201}, format="json"
    )
    assert response.status_code == 400
    assert "external_ref" in response.json()["fields"]
