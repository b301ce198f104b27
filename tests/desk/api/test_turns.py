"""POST /api/v1/tickets/{id}/turns/."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.desk.api.conftest import post_turn
from tickets.models import Ticket, Turn

pytestmark = pytest.mark.django_db


def test_appending_a_turn_answers_its_number_tokens_the_assembled_size_and_the_policy(
    agent: APIClient, ticket: Ticket
) -> None:
    first = post_turn(agent, ticket, role="customer", content="My table arrived scratched.")
    second = post_turn(
        agent, ticket, role="tool_call", tool="issue_refund", tool_call_id="c1", args={"amount_cents": 4000}
    )
    assert (first.status_code, second.status_code) == (201, 201)
    body = second.json()
    stored = Turn.objects.get(ticket=ticket, number=2)
    ticket.refresh_from_db()
    assert body == {
        "turn": 2,
        "tokens": stored.tokens,
        "context_tokens": ticket.context_tokens,
        "threshold_tokens": 6400,
        "token_budget": 8000,
        "compaction": {"status": "not_due"},
    }
    assert stored.args == {"amount_cents": 4000} and stored.tool_call_id == "c1"


@pytest.mark.parametrize(
    ("turn", "field"),
    [
        ({"role": "system", "content": "x"}, "role"),
        ({"role": "customer", "content": 5}, "content"),
        ({"role": "tool_call", "tool": "x", "args": [1, 2]}, "args"),
        ({"role": "customer", "content": "nul \x00 byte"}, "content"),
        ({"role": "agent", "content": "x", "boundary": "b" * 41}, "boundary"),
        ({"role": "agent", "content": "x", "speaker": "bot"}, "speaker"),
    ],
)
def test_a_malformed_turn_is_answered_400_naming_the_field(
    agent: APIClient, ticket: Ticket, turn: dict, field: str
) -> None:
    response = post_turn(agent, ticket, **turn)
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert not Turn.objects.filter(ticket=ticket).exists()


def test_a_turn_the_service_refuses_is_answered_400_with_its_reason(agent: APIClient, ticket: Ticket) -> None:
    response = post_turn(agent, ticket, role="tool_call", args={"a": 1})
    assert response.status_code == 400
    assert response.json() == {
        "error": "invalid",
        "message": "a tool_call turn needs its tool name",
        "field": "tool",
    }


def test_a_body_that_is_not_a_json_object_is_answered_400(agent: APIClient, ticket: Ticket) -> None:
    for raw in (b"[1, 2]", b"not json", b'{"role": NaN}', b"[" * 5000 + b"]" * 5000):
        response = agent.post(
            f"/api/v1/tickets/{ticket.ticket_id}/turns/", raw, content_type="application/json"
        )
        assert response.status_code == 400, raw[:20]
        assert response.json()["message"]
