"""The reads an agent makes on every turn cost the same number of queries however long the ticket grows."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from rest_framework.test import APIClient

from compaction.models import CompactionEvent
from core.vocabulary import CompactionStatus
from desk.turns import receive_turn
from tests.desk.api.conftest import url
from tickets.accounts import ROLES, create_agent
from tickets.models import Ticket, TicketClass
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db

# The endpoint's own reads only (context: the ticket with its state, active summary and pending claim, then the
# turns since): the token was read on the fixture's first request and is kept for SUNDRY_AUTH_CACHE_SECONDS
# (tickets.accounts.TokenCache), its last_used_at written then (at most once a minute).
STATE_QUERIES = 1
CONTEXT_QUERIES = 2


def grown_ticket(rounds: int) -> Ticket:
    """A ticket on a small budget: each round adds turns, an action, and (soon) compactions."""
    small, _ = TicketClass.objects.get_or_create(
        slug="tiny-1k",
        defaults={"token_budget": 1000, "compaction_threshold": 0.5, "keep_recent_tokens": 100},
    )
    ticket = open_ticket(
        ticket_id=f"T-{rounds}", order_id="SU-1", seller_type="marketplace", ticket_class=small
    )
    for n in range(rounds):
        receive_turn(ticket=ticket, role="customer", content=f"Round {n}: still waiting for my parcel. " * 8)
        receive_turn(
            ticket=ticket, role="agent", content=f"Round {n}: I checked again. " * 8, boundary="reply_sent"
        )
        record_action(
            ticket=ticket, tool="track_parcel", item=f"parcel-{n}", reversible=True, idempotency_key=f"k{n}"
        )
    return ticket


@pytest.fixture
def short_and_long(db: None) -> tuple[Ticket, Ticket]:
    short, long = grown_ticket(1), grown_ticket(12)
    assert not CompactionEvent.objects.filter(ticket=short).exists()
    assert CompactionEvent.objects.filter(ticket=long, status=CompactionStatus.APPLIED).count() >= 3
    return short, long


@pytest.fixture
def agent(agent: APIClient) -> APIClient:
    """The agent's client after one request: its token's last_used_at is fresh."""
    assert agent.get("/api/v1/tickets/T-none/").status_code == 404
    return agent


def test_state_costs_a_constant_number_of_queries(
    agent: APIClient, short_and_long: tuple[Ticket, Ticket], django_assert_num_queries
) -> None:
    for ticket in short_and_long:
        with django_assert_num_queries(STATE_QUERIES):
            response = agent.get(url(ticket, "state"))
        assert response.status_code == 200
    assert len(response.json()["actions_taken"]) == 12


def test_context_costs_a_constant_number_of_queries(
    agent: APIClient, short_and_long: tuple[Ticket, Ticket], django_assert_num_queries
) -> None:
    for ticket in short_and_long:
        with django_assert_num_queries(CONTEXT_QUERIES):
            response = agent.get(url(ticket, "context"))
        assert response.status_code == 200
    assert response.json()["summary"] is not None


def test_ticket_detail_and_compactions_cost_a_constant_number_of_queries(
    agent: APIClient, short_and_long: tuple[Ticket, Ticket], django_assert_num_queries
) -> None:
    for ticket in short_and_long:
        with django_assert_num_queries(
            4
        ):  # the state and ticket, figures, compactions, ledger (token cached)
            assert agent.get(url(ticket)).status_code == 200
        with django_assert_num_queries(2):
            assert agent.get(url(ticket, "compactions")).status_code == 200


# The write paths, counted as production runs them: each request's atomic block is the outermost (these
# tests run on a committed database, so no test transaction adds a savepoint around it).
# The token is cached after the first request (tickets.accounts.TokenCache): no write reads it again.
# turn: the ticket, then on PostgreSQL one statement that is its own transaction (the row locked and numbered
# by the update that moves its figures, whose RETURNING the turn's insert reads: a turn not due needs no
# BEGIN and COMMIT); elsewhere the update and the insert, in a transaction.
# action: the state and ticket rows locked with the class and the key's first answer, found by the ticket's id
# (no read of the ticket before it; on PostgreSQL the key's advisory lock taken in the same statement, named
# from the ticket's primary key by the database, which answers a duplicate key still in flight with 409 at once),
# then its writes: on PostgreSQL the state, the audit row, the ticket's figures and the key's answer in one
# statement (tickets.write_batch); elsewhere the four one by one.
# state: the ticket, the rows locked, then the state, the audit row and the ticket's figures (one statement on
# PostgreSQL, three elsewhere).
# Each but the turn on PostgreSQL also sends BEGIN and COMMIT, which Django records as statements of their own.
TRANSACTION = 2
ON_POSTGRESQL = connection.vendor == "postgresql"
TURN_POST_QUERIES = 1 + (1 if ON_POSTGRESQL else 2 + TRANSACTION)
# action: the state locked with the key's first answer, the actions it can touch (tickets.state_actions), then
# the action's row, its item key, the state, the audit row, the ticket's figures and the key's answer.
ACTION_POST_QUERIES = 2 + (1 if ON_POSTGRESQL else 6) + TRANSACTION
# state: the ticket, the state locked, its open intents, the write, then the actions' texts for the answer.
STATE_POST_QUERIES = 4 + (1 if ON_POSTGRESQL else 3) + TRANSACTION
# intent: an action's. settle: the state row locked (and only it) with its ticket and class, found by the
# ticket's id (no read of the ticket before it), the action and the open intents, then the action's row, the
# state, the audit row and the ticket's open-intent figures (one statement on PostgreSQL, four elsewhere).
INTENT_POST_QUERIES = ACTION_POST_QUERIES
SETTLE_PATCH_QUERIES = 2 + (1 if ON_POSTGRESQL else 4) + TRANSACTION


@pytest.fixture
def quiet_short_and_long(transactional_db: None) -> tuple[Ticket, Ticket]:
    """Two tickets well under their budget: 2 turns and no action, 120 turns and 20 actions, committed."""
    # A committed database is emptied between tests, the role groups of the data migration with it.
    for role in ROLES:
        Group.objects.get_or_create(name=role)
    roomy = TicketClass.objects.create(slug="roomy-100k", token_budget=100_000, compaction_threshold=0.8)
    pair = []
    for name, turns, actions in (("T-QS", 2, 0), ("T-QL", 120, 20)):
        ticket = open_ticket(ticket_id=name, order_id="SU-1", seller_type="marketplace", ticket_class=roomy)
        for n in range(turns):
            receive_turn(ticket=ticket, role="customer" if n % 2 else "agent", content=f"message {n}")
        for n in range(actions):
            record_action(
                ticket=ticket, tool="track_parcel", item=f"p-{n}", reversible=True, idempotency_key=f"q{n}"
            )
        pair.append(ticket)
    return pair[0], pair[1]


@pytest.mark.django_db(transaction=True)
def test_writes_cost_a_constant_number_of_queries(
    quiet_short_and_long: tuple[Ticket, Ticket], django_assert_num_queries
) -> None:
    """A turn that is not due, an action and a state change cost the same on a short and a long ticket."""
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-writes')}")
    assert agent.get("/api/v1/tickets/T-none/").status_code == 404  # the token cached, last_used_at fresh
    for index, ticket in enumerate(quiet_short_and_long):
        with django_assert_num_queries(TURN_POST_QUERIES):
            response = agent.post(url(ticket, "turns"), {"role": "customer", "content": "ok"}, format="json")
        assert response.status_code == 201 and response.json()["compaction"]["status"] == "not_due"
        with django_assert_num_queries(ACTION_POST_QUERIES):
            response = agent.post(
                url(ticket, "actions"),
                {"tool": "send_message", "item": f"note-{index}", "reversible": True},
                format="json",
                HTTP_IDEMPOTENCY_KEY=f"write-{index}",
            )
        assert response.status_code == 201
        version = agent.get(url(ticket, "state"))["ETag"]
        with django_assert_num_queries(STATE_POST_QUERIES):
            response = agent.post(
                url(ticket, "state"),
                {"op": "constraint_stated", "text": "email only"},
                format="json",
                HTTP_IF_MATCH=version,
            )
        assert response.status_code == 200
        with django_assert_num_queries(INTENT_POST_QUERIES):
            response = agent.post(
                url(ticket, "actions"),
                {"tool": "issue_refund", "item": f"lamp-{index}", "amount_cents": 100, "status": "intended"},
                format="json",
                HTTP_IDEMPOTENCY_KEY=f"intent-{index}",
            )
        assert response.status_code == 201
        action_id = response.json()["action"]["id"]
        with django_assert_num_queries(SETTLE_PATCH_QUERIES):
            response = agent.patch(
                url(ticket, f"actions/{action_id}"), {"status": "succeeded"}, format="json"
            )
        assert response.status_code == 200 and response.json()["action"]["status"] == "succeeded"
