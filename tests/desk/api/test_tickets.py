"""POST /api/v1/tickets/ and GET /api/v1/tickets/{id}/."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.desk.api.conftest import url
from tests.factories import chat
from tickets.models import Ticket, TicketClass

pytestmark = pytest.mark.django_db

OPEN = {"ticket_id": "T-7", "order_id": "SU-7", "seller_type": "marketplace", "ticket_class": "standard-8k"}


def test_opening_a_ticket_answers_201_with_its_token_figures(
    agent: APIClient, standard_class: TicketClass
) -> None:
    response = agent.post("/api/v1/tickets/", OPEN, format="json")
    assert response.status_code == 201
    body = response.json()
    assert response["Location"] == "/api/v1/tickets/T-7/"
    assert (body["ticket_id"], body["ticket_class"], body["state_version"], body["turn_count"]) == (
        "T-7",
        "standard-8k",
        1,
        0,
    )
    assert body["tokens"]["total"] == Ticket.objects.get(ticket_id="T-7").context_tokens
    assert body["threshold_tokens"] == 6400 and body["token_budget"] == 8000


def test_opening_a_ticket_id_twice_is_answered_409(agent: APIClient, ticket: Ticket) -> None:
    response = agent.post("/api/v1/tickets/", {**OPEN, "ticket_id": "T-1"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"] == "ticket_exists"


def test_an_unknown_ticket_class_is_answered_400_naming_it(
    agent: APIClient, standard_class: TicketClass
) -> None:
    response = agent.post("/api/v1/tickets/", {**OPEN, "ticket_class": "huge-1m"}, format="json")
    assert response.status_code == 400
    assert "huge-1m" in response.json()["message"]
    assert not Ticket.objects.filter(ticket_id="T-7").exists()


def test_unknown_fields_are_answered_400_naming_them(agent: APIClient, standard_class: TicketClass) -> None:
    response = agent.post("/api/v1/tickets/", {**OPEN, "priority": "high"}, format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {"priority": [response.json()["fields"]["priority"][0]]}
    assert "Unknown field" in response.json()["message"]
    assert not Ticket.objects.filter(ticket_id="T-7").exists()


def test_ticket_detail_gives_the_token_figures_of_the_assembled_request(
    agent: APIClient, ticket: Ticket
) -> None:
    chat(ticket, 4)
    ticket.refresh_from_db()
    body = agent.get(url(ticket)).json()
    assert body["turn_count"] == 4
    tokens = body["tokens"]
    assert tokens["total"] == ticket.context_tokens
    assert tokens["total"] == sum(tokens[k] for k in ("system", "state", "summary", "turns", "framing"))
    assert tokens["turns"] > 0 and tokens["summary"] == 0


def test_an_unknown_ticket_is_answered_404_on_every_endpoint(agent: APIClient, db: None) -> None:
    for what in ("", "state", "context", "compactions"):
        response = agent.get(url("T-404", what))
        assert response.status_code == 404, what
        assert response.json()["error"] == "not_found"
    for what in ("turns", "actions", "state"):
        response = agent.post(url("T-404", what), {}, format="json")
        assert response.status_code == 404, what


def test_a_ticket_id_the_database_cannot_hold_is_just_unknown(agent: APIClient, db: None) -> None:
    assert agent.get("/api/v1/tickets/T%00x/state/").status_code == 404
    assert agent.get(url("T-" + "9" * 100, "state")).status_code == 404


def test_the_ticket_shows_what_compaction_cost_it(agent: APIClient, scenario: dict, openai_server) -> None:
    """Per-ticket totals: the summarizer's usage priced at the class's summarizer prices."""
    import json

    from compaction.models import CompactionEvent
    from tests.factories import import_t40118
    from tests.fake_openai import Reply

    summary = {
        "decisions": [],
        "actions_taken": ["issue_refund 4000 cents garden-table at turn 6"],
        "customer_constraints": ["no replacement wanted"],
        "open_questions": ["photo of the parasol still outstanding"],
        "narrative": "Refunded the scratched table; tracking the parasol.",
    }
    with openai_server([Reply(content=json.dumps(summary), prompt_tokens=5000, completion_tokens=100)]):
        ticket = import_t40118(scenario, backend="openai")
    totals = agent.get(url(ticket)).json()["compaction_totals"]
    event = CompactionEvent.objects.get(ticket=ticket, status="applied")
    assert (totals["applied"], totals["deferred"], totals["failed"]) == (1, 1, 0)
    assert totals["tokens_saved"] == event.tokens_before - event.tokens_after > 6000
    assert (totals["summarizer_input_tokens"], totals["summarizer_output_tokens"]) == (5000, 100)
    # 5000 x $0.10 + 100 x $0.40 per million tokens
    assert totals["cost_usd"] == "0.000540"


def test_an_agent_moves_a_ticket_to_waiting_and_back(agent: APIClient, ticket: Ticket) -> None:
    response = agent.patch(url(ticket), {"status": "waiting"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "waiting"
    assert Ticket.objects.get(pk=ticket.pk).status == "waiting"
    assert agent.patch(url(ticket), {"status": "open"}, format="json").json()["status"] == "open"


def test_an_unknown_status_is_refused_and_nothing_changes(agent: APIClient, ticket: Ticket) -> None:
    response = agent.patch(url(ticket), {"status": "closed-forever"}, format="json")
    assert response.status_code == 400
    assert "status" in response.json()["message"]
    assert Ticket.objects.get(pk=ticket.pk).status == "open"


def test_a_supervisor_cannot_change_a_status_through_the_api(supervisor: APIClient, ticket: Ticket) -> None:
    assert supervisor.patch(url(ticket), {"status": "resolved"}, format="json").status_code == 403
    assert Ticket.objects.get(pk=ticket.pk).status == "open"
