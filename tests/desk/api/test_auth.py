"""Who may use the API: agents write with their token; supervisors and admins read; others are refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from core.vocabulary import StateOp
from tests.desk.api.conftest import REFUND, post_action, post_state, post_turn, url
from tickets.accounts import create_agent, create_person, issue_agent_token
from tickets.models import StateChange, Ticket, Turn

pytestmark = pytest.mark.django_db


def test_no_token_is_answered_401_with_a_json_message(anonymous: APIClient, ticket: Ticket) -> None:
    response = anonymous.get(url(ticket, "state"))
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")
    assert response.json()["error"] == "not_authenticated"
    assert "credentials" in response.json()["message"]


def test_a_bad_token_is_answered_401(ticket: Ticket) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.get(url(ticket, "state"))
    assert response.status_code == 401
    assert response.json()["error"] == "authentication_failed"


def test_each_agent_has_its_own_token_and_its_writes_are_audited_as_itself(
    agent: APIClient, ticket: Ticket
) -> None:
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-jones')}")
    assert post_turn(agent, ticket, role="customer", content="Hello").status_code == 201
    assert post_state(agent, ticket, '"1"', op="decision_made", text="first").status_code == 200
    assert post_state(other, ticket, '"2"', op="decision_made", text="second").status_code == 200
    changes = StateChange.objects.filter(ticket=ticket, op=StateOp.DECISION_MADE).order_by("to_version")
    assert [(c.actor_kind, c.actor.username if c.actor else None) for c in changes] == [
        ("agent", "agent-smith"),
        ("agent", "agent-jones"),
    ]


def test_supervisor_writing_through_the_api_is_answered_403(supervisor_user: User, ticket: Ticket) -> None:
    """Even with a token, a supervisor may not append turns, record actions or change the state."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_agent_token(user=supervisor_user)}")
    assert post_turn(client, ticket, role="customer", content="hi").status_code == 403
    refused = post_action(client, ticket, "k1", **REFUND)
    assert refused.status_code == 403
    assert "only agents write" in refused.json()["message"]
    assert post_state(client, ticket, '"1"', op="decision_made", text="x").status_code == 403
    assert Turn.objects.filter(ticket=ticket).count() == 0


def test_supervisor_reads_every_endpoint_with_a_browser_session(
    supervisor: APIClient, ticket: Ticket
) -> None:
    for what in ("", "state", "context", "compactions"):
        assert supervisor.get(url(ticket, what)).status_code == 200, what


def test_admin_reads_but_does_not_write(ticket: Ticket) -> None:
    client = APIClient()
    client.force_login(create_person(username="ada", password="correct-horse-battery", role="admin"))
    assert client.get(url(ticket, "state")).status_code == 200
    assert post_turn(client, ticket, role="customer", content="hi").status_code == 403


def test_a_user_without_a_role_is_answered_403_even_for_reads(ticket: Ticket) -> None:
    client = APIClient()
    client.force_login(User.objects.create_user(username="nobody", password="x"))
    response = client.get(url(ticket, "state"))
    assert response.status_code == 403
    assert "role" in response.json()["message"]
