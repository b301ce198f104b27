"""GET /api/v1/tickets/{id}/context/ and GET .../compactions/."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from compaction.selectors import assemble_context
from tests.desk.api.conftest import url
from tests.desk.api.test_query_counts import grown_ticket
from tests.factories import chat
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def test_context_is_the_request_to_send_with_its_token_breakdown(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 3)
    body = agent.get(url(ticket, "context")).json()
    assert body == assemble_context(ticket).as_json()
    assert [t["number"] for t in body["turns"]] == [1, 2, 3]
    assert body["summary"] is None and body["summary_covers_turns"] is None
    assert body["tokens"]["total"] == Ticket.objects.get(pk=ticket.pk).context_tokens
    assert (body["token_budget"], body["threshold_tokens"]) == (8000, 6400)


def test_after_compaction_the_context_starts_after_the_replaced_turns(agent: APIClient, db: None) -> None:
    ticket = grown_ticket(12)
    body = agent.get(url(ticket, "context")).json()
    first, last = body["summary_covers_turns"]
    assert 1 <= first <= last
    # The pinned state of this small class is large, so compaction may replace every turn to fit.
    assert [t["number"] for t in body["turns"]] == list(range(last + 1, ticket.turn_count + 1))
    assert set(body["summary"]) >= {"decisions", "actions_taken", "customer_constraints", "open_questions"}


def test_compactions_list_every_event_with_tokens_cost_and_coverage(agent: APIClient, db: None) -> None:
    ticket = grown_ticket(12)
    events = agent.get(url(ticket, "compactions")).json()
    assert [e["number"] for e in events] == list(range(1, len(events) + 1))
    applied = [e for e in events if e["status"] == "applied"]
    assert applied
    for event in applied:
        first, last = event["replaced_turns"]
        assert first <= last < event["at_turn"] + 1
        assert event["tokens_after"] < event["tokens_before"]
        assert event["tokens_saved"] == event["tokens_before"] - event["tokens_after"]
        assert set(event["coverage"]) == {"covered", "missing"}
        assert event["summarizer_backend"] == "extractive"
        assert isinstance(event["cost_usd"], str)


def test_a_ticket_without_compactions_lists_none(agent: APIClient, ticket: Ticket) -> None:
    assert agent.get(url(ticket, "compactions")).json() == []
