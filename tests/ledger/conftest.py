"""Small fixtures for the ledger's tests: a ticket with money actions, and entries as the payment system sends them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from ledger.entries import EntryIn, parse_entry
from ledger.services import Ingested, ingest_ledger_entries
from tickets.accounts import create_agent, create_person
from tickets.models import Ticket
from tickets.services.actions import record_action, settle_action


def entry(
    entry_id: str, *, amount_cents: int = 4000, kind: str = "refund", at: datetime | None = None, **more: Any
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": entry_id,
        "kind": kind,
        "amount_cents": amount_cents,
        "currency": "USD",
        "created_at": (at or timezone.now()).isoformat(),
        **more,
    }
    if "ticket_id" not in data and "order_id" not in data:
        data["ticket_id"] = "T-1"
    return data


def ingest(*entries: dict[str, Any], now: datetime | None = None) -> Ingested:
    parsed: list[tuple[str, EntryIn]] = [(f"entries[{i}]", parse_entry(e)) for i, e in enumerate(entries)]
    return ingest_ledger_entries(entries=parsed, now=now)


def refund(
    ticket: Ticket,
    key: str,
    *,
    amount_cents: int = 4000,
    item: str = "garden-table",
    external_ref: str | None = None,
) -> str:
    """A refund reserved and settled succeeded (with the payment system's reference when given): its id."""
    recorded = record_action(
        ticket=ticket,
        tool="issue_refund",
        idempotency_key=key,
        item=item,
        amount_cents=amount_cents,
        status="intended",
    )
    action_id = recorded.action["id"]
    settle_action(ticket=ticket, action_id=action_id, status="succeeded", external_ref=external_ref)
    return action_id


@pytest.fixture
def agent(db: None) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-smith')}")
    return client


@pytest.fixture
def sally(db: None) -> User:
    return create_person(username="sally", password="correct-horse-battery", role="supervisor")
