"""The policy's decide step when the pinned state alone fills the threshold: it says so, it does not compact."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from compaction.models import CompactionEvent
from desk.turns import receive_turn
from tickets.accounts import create_agent
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db

CONSTRAINT = (
    "the buyer only accepts a refund to the original card, never store credit or a voucher of any kind"
)


def small_ticket(ticket_id: str) -> Ticket:
    klass, _ = TicketClass.objects.get_or_create(
        slug="tiny-512", defaults={"token_budget": 512, "compaction_threshold": 0.5, "keep_recent_tokens": 40}
    )
    return open_ticket(ticket_id=ticket_id, order_id="SU-9", seller_type="marketplace", ticket_class=klass)


def fill_state(ticket: Ticket, tokens: int) -> None:
    n = 0
    while ticket.pinned_state.tokens + ticket.system_prompt_tokens < tokens:
        change_state(ticket=ticket, op="constraint_stated", text=f"{CONSTRAINT} ({n})")
        ticket.pinned_state.refresh_from_db()
        n += 1


def test_a_boundary_with_the_state_over_the_threshold_is_flagged_not_compacted() -> None:
    ticket = small_ticket("T-FULL")
    fill_state(ticket, 260)  # over the 256-token threshold, under the 512 budget
    receive_turn(ticket=ticket, role="customer", content="Any news on my refund?")
    received = receive_turn(ticket=ticket, role="agent", content="Still checking.", boundary="reply_sent")

    answer = received.as_json()["compaction"]
    assert answer["status"] == "not_due"
    assert answer["state_over_threshold"] is True
    assert "pinned state alone" in answer["reason"] and "256-token threshold" in answer["reason"]
    assert not CompactionEvent.objects.filter(ticket=ticket).exists()


def test_the_same_boundary_with_a_small_state_compacts() -> None:
    """The control: the turns, not the state, fill the window, so compacting helps and runs."""
    ticket = small_ticket("T-ROOMY")
    fill_state(ticket, 60)
    for n in range(6):
        receive_turn(ticket=ticket, role="customer", content=f"Message {n}: where is my parcel? " * 6)
    received = receive_turn(ticket=ticket, role="agent", content="Let me check.", boundary="reply_sent")

    answer = received.as_json()["compaction"]
    assert "state_over_threshold" not in answer
    assert answer["status"] in {"applied", "failed"}
    assert CompactionEvent.objects.filter(ticket=ticket, at_turn=received.turn.number).exists()


def test_over_the_budget_the_hard_ceiling_still_compacts_when_the_state_fits_the_budget() -> None:
    """The state alone is over the threshold but under the budget: turns past the budget still get compacted."""
    ticket = small_ticket("T-CEILING")
    fill_state(ticket, 300)
    answers = [
        receive_turn(ticket=ticket, role="customer", content=f"Message {n}: where is my parcel? " * 10)
        for n in range(4)
    ]
    over = [a for a in answers if a.compaction.status in ("forced", "applied")]
    assert over, [a.compaction for a in answers]
    assert not over[0].compaction.state_over_threshold
    assert all(a.context_tokens <= a.token_budget for a in answers)
    assert CompactionEvent.objects.filter(ticket=ticket).applied().exists()


def test_the_ticket_says_when_its_state_alone_fills_the_threshold() -> None:
    """GET /tickets/{id}/ carries the flag an agent or a supervisor can act on before the next boundary."""
    full, roomy = small_ticket("T-FULL"), small_ticket("T-ROOMY")
    fill_state(full, 260)
    fill_state(roomy, 60)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-flag')}")
    assert client.get("/api/v1/tickets/T-FULL/").json()["state_over_threshold"] is True
    assert client.get("/api/v1/tickets/T-ROOMY/").json()["state_over_threshold"] is False
