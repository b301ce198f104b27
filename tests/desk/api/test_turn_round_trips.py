"""The turn POST's round trips to PostgreSQL, counted on the wire (bench/wire.py) as `make bench` counts them
(issue 23's target for a turn that is not due: at most 4): the ticket read, then one statement that is its own
transaction (no BEGIN or COMMIT)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from rest_framework.test import APIClient

from bench.wire import Counts, WireCounter
from tests.desk.api.conftest import url
from tickets.accounts import ROLES, create_agent
from tickets.models import Ticket, TicketClass, Turn
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TURN_POST_ROUND_TRIPS = 4


@pytest.fixture
def wire(transactional_db: None) -> Iterator[WireCounter]:
    """This process's connection to PostgreSQL through the counter, for the test (then straight again)."""
    db = connection.settings_dict
    saved = db["HOST"], db["PORT"], dict(db["OPTIONS"])
    with WireCounter((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))) as counter:
        connection.close()
        db["HOST"], db["PORT"] = "127.0.0.1", counter.port
        db["OPTIONS"] = {**db["OPTIONS"], "sslmode": "disable"}  # the protocol stays readable
        try:
            yield counter
        finally:
            connection.close()
            db["HOST"], db["PORT"], db["OPTIONS"] = saved


@pytest.fixture
def ticket(transactional_db: None) -> Ticket:
    """A ticket whose class's threshold no test turn reaches: every turn here is not due."""
    roomy = TicketClass.objects.create(slug="roomy-1m", token_budget=1_000_000, compaction_threshold=0.9)
    return open_ticket(ticket_id="T-RT", order_id="SU-1", seller_type="marketplace", ticket_class=roomy)


@pytest.fixture
def agent(wire: WireCounter, ticket: Ticket) -> APIClient:
    """An agent whose token is cached and connection open (its first request is not the one counted)."""
    for role in ROLES:  # the groups a migration made, flushed by an earlier transactional test
        Group.objects.get_or_create(name=role)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-wire')}")
    assert client.get(url(ticket, "state")).status_code == 200
    return client


def counted(wire: WireCounter, request: Any) -> tuple[Any, Counts]:
    before = wire.snapshot()
    response = request()
    return response, wire.snapshot().minus(before)


def post(agent: APIClient, ticket: Ticket, key: str | None = None, **turn: Any) -> Any:
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    body = turn or {"role": "customer", "content": "Where is my parcel?"}
    return agent.post(url(ticket, "turns"), body, format="json", **extra)


def test_a_turn_that_is_not_due_takes_at_most_four_round_trips(
    wire: WireCounter, agent: APIClient, ticket: Ticket
) -> None:
    for number in (1, 2):
        response, trips = counted(wire, lambda: post(agent, ticket))
        assert response.status_code == 201 and response.json()["compaction"]["status"] == "not_due"
        assert response.json()["turn"] == number
        assert trips.connections == 0  # the open connection, no new one
        assert trips.round_trips <= TURN_POST_ROUND_TRIPS, trips
        assert trips.statements == 2, trips  # the ticket read and the append
    assert Ticket.objects.get(pk=ticket.pk).turn_count == 2


def test_a_turn_with_an_idempotency_key_takes_as_many_and_its_retry_one_more_at_most(
    wire: WireCounter, agent: APIClient, ticket: Ticket
) -> None:
    """The key's lock and the lookup of its first turn go in the statement that appends the turn."""
    first, trips = counted(wire, lambda: post(agent, ticket, "turn-1"))
    assert first.status_code == 201 and trips.round_trips <= TURN_POST_ROUND_TRIPS, trips
    again, trips = counted(wire, lambda: post(agent, ticket, "turn-1"))
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    # The replay's compaction: the event at its turn, if any (one read, made by the policy's layer).
    assert trips.round_trips <= TURN_POST_ROUND_TRIPS + 1, trips
    assert Turn.objects.filter(ticket=ticket).count() == 1
