"""Idempotency-Key on POST .../state/: the actions' semantics. A retried state write with the same key and body
gets its first answer again (status and body, Idempotent-Replayed), not 412; the same key with another body is
422 and writes nothing; a key still in flight is 409; keys are per ticket and per token."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Group
from django.db import connection, connections, transaction
from rest_framework.test import APIClient

from tests.desk.api.conftest import post_state, url
from tests.factories import chat
from tickets.accounts import ROLES, create_agent
from tickets.models import AgentToken, IdempotencyRecord, StateChange, Ticket, TicketClass
from tickets.services.idempotency import advisory_key, scoped_key
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db

CONSTRAINT = {"op": "constraint_stated", "text": "no store credit, refund to the card", "at_turn": 1}


def keyed(client: APIClient, ticket: Ticket | str, if_match: str, key: str, **body: object):
    return client.post(
        url(ticket, "state"), body, format="json", HTTP_IF_MATCH=if_match, HTTP_IDEMPOTENCY_KEY=key
    )


def test_a_retried_state_write_gets_its_first_answer_not_412(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    first = keyed(agent, ticket, '"1"', "T-1-c-1", **CONSTRAINT)
    assert first.status_code == 200 and first["ETag"] == '"2"'
    assert "Idempotent-Replayed" not in first

    # The answer was lost; the agent retries with the same If-Match, key and body.
    retry = keyed(agent, ticket, '"1"', "T-1-c-1", **CONSTRAINT)
    assert retry.status_code == 200, retry.content
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.json() == first.json()
    assert retry["ETag"] == '"2"'
    assert StateChange.objects.filter(ticket=ticket, op="constraint_stated").count() == 1
    ticket.pinned_state.refresh_from_db()
    assert ticket.pinned_state.version == 2
    assert len(ticket.pinned_state.data["customer_constraints"]) == 1

    # Without a key the same retry is the stale version it always was.
    bare = post_state(agent, ticket, '"1"', **CONSTRAINT)
    assert bare.status_code == 412 and bare.json()["error"] == "stale_version"


def test_the_same_key_with_another_body_is_422_and_writes_nothing(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    assert keyed(agent, ticket, '"1"', "k-1", **CONSTRAINT).status_code == 200
    other = keyed(agent, ticket, '"2"', "k-1", **{**CONSTRAINT, "text": "a voucher is fine after all"})
    assert other.status_code == 422
    assert other.json()["error"] == "idempotency_key_reused" and "k-1" in other.json()["message"]
    ticket.pinned_state.refresh_from_db()
    assert ticket.pinned_state.version == 2
    assert [c["text"] for c in ticket.pinned_state.data["customer_constraints"]] == [CONSTRAINT["text"]]


def test_a_refused_write_stores_nothing_and_its_retry_is_judged_afresh(
    agent: APIClient, ticket: Ticket
) -> None:
    chat(ticket, 2)
    stale = keyed(agent, ticket, '"7"', "k-2", **CONSTRAINT)
    assert stale.status_code == 412
    bad = keyed(agent, ticket, '"1"', "k-2", op="question_resolved", text="Q9")  # no such question
    assert bad.status_code == 400
    assert not IdempotencyRecord.objects.filter(ticket=ticket).exists()
    fixed = keyed(agent, ticket, '"1"', "k-2", **CONSTRAINT)
    assert fixed.status_code == 200 and "Idempotent-Replayed" not in fixed


def test_keys_are_per_ticket_and_per_token(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    twin = open_ticket(
        ticket_id="T-2", order_id="SU-2", seller_type="marketplace", ticket_class=ticket.ticket_class
    )
    chat(twin, 2)
    assert keyed(agent, ticket, '"1"', "shared-key", **CONSTRAINT).status_code == 200
    # The same key on another ticket is another request.
    on_twin = keyed(agent, twin, '"1"', "shared-key", **CONSTRAINT)
    assert on_twin.status_code == 200 and "Idempotent-Replayed" not in on_twin
    # Another agent's token with the same key on the same ticket is its own request too (and a new change).
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-other')}")
    theirs = keyed(other, ticket, '"2"', "shared-key", **CONSTRAINT)
    assert theirs.status_code == 200 and "Idempotent-Replayed" not in theirs
    assert theirs.json()["version"] == 3
    # A state key never answers for an action key of the same spelling: actions keep theirs apart.
    assert IdempotencyRecord.objects.filter(ticket=ticket, key="shared-key").count() == 0


def test_a_malformed_key_is_400(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    response = keyed(agent, ticket, '"1"', "has spaces in it", **CONSTRAINT)
    assert response.status_code == 400 and response.json()["error"] == "bad_header"
    assert StateChange.objects.filter(ticket=ticket, op="constraint_stated").count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_state_write_whose_key_is_in_flight_is_409_then_goes_through() -> None:
    for role in ROLES:
        Group.objects.get_or_create(name=role)
    klass = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    ticket = open_ticket(ticket_id="T-9", order_id="SU-9", seller_type="marketplace", ticket_class=klass)
    chat(ticket, 2)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-flight')}")
    stored = scoped_key("state", f"token-{AgentToken.objects.get().pk}", "c-1")
    holding, release = threading.Event(), threading.Event()

    def first_request_in_flight() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(ticket, stored)])
                holding.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=first_request_in_flight)
    holder.start()
    try:
        assert holding.wait(timeout=10)
        in_flight = keyed(client, ticket, '"1"', "c-1", **CONSTRAINT)
    finally:
        release.set()
        holder.join(timeout=30)
    assert in_flight.status_code == 409
    assert in_flight.json()["error"] == "idempotency_key_in_flight"
    assert StateChange.objects.filter(ticket=ticket, op="constraint_stated").count() == 0
    after = keyed(client, ticket, '"1"', "c-1", **CONSTRAINT)
    assert after.status_code == 200 and after.json()["version"] == 2
