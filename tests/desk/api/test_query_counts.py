"""The reads an agent makes on every turn cost the same number of queries however long the ticket grows."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from compaction.models import CompactionEvent, CompactionStatus
from desk.turns import receive_turn
from tests.desk.api.conftest import url
from tickets.models import Ticket, TicketClass
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db

# Token auth (1), the user's roles (1), then the endpoint's own reads (context: the ticket with its state and
# active summary, then the turns since).
STATE_QUERIES = 3
CONTEXT_QUERIES = 4


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
        # The token figures come from stored sums: no query adds up the turns again.
        with django_assert_num_queries(5):
            assert agent.get(url(ticket)).status_code == 200
        with django_assert_num_queries(4):
            assert agent.get(url(ticket, "compactions")).status_code == 200


def test_the_context_leaves_the_actions_bookkeeping_out_and_the_state_keeps_it(
    agent: APIClient, short_and_long: tuple[Ticket, Ticket]
) -> None:
    """What the model reads has no idempotency keys or recorded_by; the state an agent's code reads has them."""
    short, _ = short_and_long
    context = agent.get(url(short, "context")).json()
    state = agent.get(url(short, "state")).json()
    assert context["pinned_state"]["actions_taken"][0] == {
        k: v for k, v in state["actions_taken"][0].items() if k not in {"idempotency_key", "recorded_by"}
    }
    assert state["actions_taken"][0]["idempotency_key"] == "k0"
    assert "idempotency_key" not in context["pinned_state"]["actions_taken"][0]


def test_the_ticket_figures_from_stored_sums_match_the_assembled_context(
    agent: APIClient, short_and_long: tuple[Ticket, Ticket]
) -> None:
    """The ticket's token figures (from Ticket.context_tokens) are the context's own, before and after compaction."""
    for ticket in short_and_long:
        detail = agent.get(url(ticket)).json()
        context = agent.get(url(ticket, "context")).json()
        assert detail["tokens"] == context["tokens"]
