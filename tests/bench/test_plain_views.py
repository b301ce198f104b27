"""The bench's plain-view baseline (P) answers the same requests as the desk, with the desk's own token."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import chat
from tickets.accounts import create_agent
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.urls("bench.urls")]


def test_plain_views_answer_an_agent_token_and_refuse_a_bad_one(ticket: Ticket) -> None:
    chat(ticket, 2)
    token = create_agent(name="bench-agent")
    good = Client(HTTP_AUTHORIZATION=f"Token {token}")
    base = f"/plain/tickets/{ticket.ticket_id}"
    assert good.get(f"{base}/state/").json()["ticket"] == ticket.ticket_id
    assert len(good.get(f"{base}/context/").json()["turns"]) == 2
    turn = good.post(
        f"{base}/turns/", {"role": "customer", "content": "hello"}, content_type="application/json"
    )
    assert turn.status_code == 201 and turn.json()["turn"] == 3
    action = good.post(
        f"{base}/actions/",
        {"tool": "issue_refund", "item": "x", "amount_cents": 100},
        content_type="application/json",
        headers={"Idempotency-Key": "p-1"},
    )
    assert action.status_code == 201 and action.json()["refunded_cents_total"] == 100
    bad = Client(HTTP_AUTHORIZATION="Token not-a-real-token-at-all")
    assert bad.get(f"{base}/state/").status_code == 401
