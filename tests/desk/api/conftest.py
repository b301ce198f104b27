"""Named users and clients shared by the API tests."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tickets.accounts import create_agent, create_person
from tickets.models import Ticket


@pytest.fixture
def agent_token(db: None) -> str:
    return create_agent(name="agent-smith")


@pytest.fixture
def agent(agent_token: str) -> APIClient:
    """A client speaking as an agent, with its token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {agent_token}")
    return client


@pytest.fixture
def supervisor_user(db: None) -> User:
    return create_person(username="sally", password="correct-horse-battery", role="supervisor")


@pytest.fixture
def supervisor(supervisor_user: User) -> APIClient:
    """A supervisor logged in through the browser session."""
    client = APIClient()
    client.force_login(supervisor_user)
    return client


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


def url(ticket: Ticket | str, what: str = "") -> str:
    ticket_id = ticket if isinstance(ticket, str) else ticket.ticket_id
    return f"/api/v1/tickets/{ticket_id}/" + (f"{what}/" if what else "")


def post_turn(client: APIClient, ticket: Ticket | str, **turn: Any) -> Any:
    return client.post(url(ticket, "turns"), turn, format="json")


def post_action(client: APIClient, ticket: Ticket | str, key: str | None, **body: Any) -> Any:
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post(url(ticket, "actions"), body, format="json", **extra)


def post_state(client: APIClient, ticket: Ticket | str, if_match: str | None, **body: Any) -> Any:
    extra = {"HTTP_IF_MATCH": if_match} if if_match is not None else {}
    return client.post(url(ticket, "state"), body, format="json", **extra)


REFUND = {
    "tool": "issue_refund",
    "item": "garden-table",
    "amount_cents": 4000,
    "at_turn": 1,
    "reversible": False,
}
