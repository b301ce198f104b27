"""Turns as real agent runtimes post them: no tool-call ids, empty results, reused ids, long tool chains.

Every request stays within its budget where a safe cut exists; compaction fires and pays for itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from compaction.models import CompactionEvent
from tests.desk.api.conftest import post_turn, url
from tickets.models import Ticket, TicketClass, Turn
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db

TRACKING = "Scan: parcel SU-88 left the depot at 06:12, arrived at the hub at 09:40, out for delivery. "


@pytest.fixture
def small_ticket(db: None) -> Ticket:
    klass = TicketClass.objects.create(
        slug="small-2k", token_budget=2000, compaction_threshold=0.8, keep_recent_tokens=400
    )
    return open_ticket(ticket_id="T-RT", order_id="SU-88", seller_type="marketplace", ticket_class=klass)


def post(agent: APIClient, ticket: Ticket, **turn: Any) -> dict[str, Any]:
    response = post_turn(agent, ticket, **turn)
    assert response.status_code == 201, response.json()
    return response.json()


def test_thirty_steps_without_tool_call_ids_compact_and_stay_within_the_budget(
    agent: APIClient, small_ticket: Ticket
) -> None:
    """A runtime that never sends tool_call_id: results pair with their calls by order, so boundaries come."""
    answers = []
    for step in range(30):
        post(agent, small_ticket, role="customer", content=f"Step {step}: where is my parcel?")
        post(agent, small_ticket, role="tool_call", tool="track_parcel", args={"order": "SU-88"})
        post(agent, small_ticket, role="tool_result", tool="track_parcel", content=TRACKING * 2)
        answers.append(
            post(
                agent,
                small_ticket,
                role="agent",
                content=f"Step {step}: it is on its way.",
                boundary="reply_sent",
            )
        )
    assert any(a["compaction"]["status"] == "applied" for a in answers)
    assert all(a["context_tokens"] <= 2000 for a in answers)
    context = agent.get(url(small_ticket, "context")).json()
    assert context["tokens"]["total"] <= 1600


def test_an_empty_tool_result_is_a_turn(agent: APIClient, small_ticket: Ticket) -> None:
    """A `think` tool that returns "" is stored, so turn numbers stay in step with the transcript."""
    post(agent, small_ticket, role="tool_call", tool="think", args={"thought": "check the refund policy"})
    answer = post(agent, small_ticket, role="tool_result", tool="think", content="")
    assert answer["turn"] == 2
    assert Turn.objects.get(ticket=small_ticket, number=2).content == ""


def test_a_reused_tool_call_id_starts_a_new_pair(agent: APIClient, small_ticket: Ticket) -> None:
    """Real logs reuse ids: the second call with id c1 is answered by the second result, and the step ends."""
    for step in range(12):
        post(agent, small_ticket, role="tool_call", tool="track_parcel", tool_call_id="c1", args={"n": step})
        post(agent, small_ticket, role="tool_result", tool_call_id="c1", content=TRACKING * 6)
        last = post(agent, small_ticket, role="agent", content="Still on its way.", boundary="reply_sent")
    assert last["context_tokens"] <= 2000
    assert CompactionEvent.objects.filter(ticket=small_ticket).applied().exists()


def test_a_long_chain_of_tool_calls_is_forced_under_the_budget(
    agent: APIClient, small_ticket: Ticket
) -> None:
    """Forty call/result pairs with no agent text between them: no boundary ever comes, so the hard ceiling
    compacts what is complete and keeps the newest unfinished exchange verbatim."""
    post(agent, small_ticket, role="customer", content="Please check all my parcels.")
    statuses = []
    for n in range(40):
        post(agent, small_ticket, role="tool_call", tool="track_parcel", args={"parcel": n})
        answer = post(agent, small_ticket, role="tool_result", tool="track_parcel", content=TRACKING * 2)
        statuses.append(answer["compaction"]["status"])
        assert answer["context_tokens"] <= 2000, (n, answer)
    assert "forced" in statuses
    forced = CompactionEvent.objects.filter(ticket=small_ticket, status="forced").first()
    assert forced is not None and "hard ceiling" in forced.reason
    context = agent.get(url(small_ticket, "context")).json()
    assert context["turns"], "the newest exchange stays verbatim"
    assert context["turns"][-1]["role"] == "tool_result"


def test_a_single_exchange_bigger_than_the_budget_is_over_budget_and_says_so(
    agent: APIClient, small_ticket: Ticket
) -> None:
    """No safe cut exists when the only turns are one unfinished exchange: the answer says over_budget."""
    post(agent, small_ticket, role="tool_call", tool="export_history", args={"order": "SU-88"})
    answer = post(agent, small_ticket, role="tool_result", tool="export_history", content=TRACKING * 80)
    assert answer["compaction"]["status"] == "over_budget"
    assert "no safe cut" in answer["compaction"]["reason"]
    event = CompactionEvent.objects.get(ticket=small_ticket, status="over_budget")
    assert event.tokens_before > 2000


def tight_ticket(min_gain_share: float) -> Ticket:
    """A system prompt that alone nearly fills the threshold: replacing the few turns cannot pay for itself."""
    klass = TicketClass.objects.create(
        slug="tight-1k",
        token_budget=1000,
        compaction_threshold=0.5,
        keep_recent_tokens=0,
        min_gain_share=min_gain_share,
    )
    return open_ticket(
        ticket_id="T-TIGHT",
        order_id="SU-1",
        seller_type="marketplace",
        ticket_class=klass,
        system_prompt="Policy: " + "be precise and kind to the customer; " * 45,
    )


def test_a_compaction_that_would_not_shrink_the_request_is_not_applied(agent: APIClient, db: None) -> None:
    """With no minimum gain the compaction is tried, and the apply step refuses a summary that does not shrink."""
    ticket = tight_ticket(min_gain_share=0.0)
    post(
        agent, ticket, role="customer", content="I have a question about order SU-1, it has not arrived. " * 3
    )
    answer = post(agent, ticket, role="agent", content="Hello.", boundary="reply_sent")
    assert answer["compaction"]["status"] == "failed"
    assert "would not make the request smaller" in answer["compaction"]["reason"]
    assert answer["context_tokens"] == Ticket.objects.get(pk=ticket.pk).context_tokens
    assert not CompactionEvent.objects.filter(ticket=ticket).applied().exists()


def test_with_the_default_minimum_gain_that_compaction_is_not_even_tried(agent: APIClient, db: None) -> None:
    """The class's minimum gain (0.1 of the budget) judges it before any summarizer call: low_gain, no event."""
    ticket = tight_ticket(min_gain_share=0.1)
    post(
        agent, ticket, role="customer", content="I have a question about order SU-1, it has not arrived. " * 3
    )
    answer = post(agent, ticket, role="agent", content="Hello.", boundary="reply_sent")
    assert answer["compaction"]["status"] == "low_gain", answer["compaction"]
    assert answer["compaction"]["state_crowded"] is True
    assert answer["compaction"]["expected_gain"] < answer["compaction"]["min_gain"] == 100
    assert not CompactionEvent.objects.filter(ticket=ticket).exists()


def post_keyed(agent: APIClient, ticket: Ticket, key: str, **turn: Any) -> Any:
    return agent.post(url(ticket, "turns"), turn, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_a_retried_turn_with_the_same_idempotency_key_is_stored_once(
    agent: APIClient, small_ticket: Ticket
) -> None:
    first = post_keyed(agent, small_ticket, "turn-1", role="customer", content="Hello")
    again = post_keyed(agent, small_ticket, "turn-1", role="customer", content="Hello")
    assert (first.status_code, again.status_code) == (201, 201), (first.json(), again.json())
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert again.json() == first.json()
    assert Turn.objects.filter(ticket=small_ticket).count() == 1
    other = post_keyed(agent, small_ticket, "turn-1", role="customer", content="Hi there")
    assert other.status_code == 422 and other.json()["error"] == "idempotency_key_reused"
    bad = post_keyed(agent, small_ticket, "has space", role="customer", content="Hello")
    assert bad.status_code == 400


def test_every_turn_records_the_account_that_posted_it(agent: APIClient, small_ticket: Ticket) -> None:
    post(agent, small_ticket, role="customer", content="Hello")
    turn = Turn.objects.get(ticket=small_ticket, number=1)
    assert turn.posted_by is not None and turn.posted_by.username == "agent-smith"
    assert (turn.token_budget, turn.threshold_tokens) == (2000, 1600)
    assert turn.context_tokens == Ticket.objects.get(pk=small_ticket.pk).context_tokens
