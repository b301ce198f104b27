"""Every state item records how the desk knows it: through the API, the importer and corrections."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from tests.desk.api.conftest import REFUND, post_action, post_state, url
from tests.factories import chat
from tickets.models import ActorKind, PinnedState, StateChange, Ticket
from tickets.services.actors import Actor
from tickets.services.state_changes import correct_state

pytestmark = pytest.mark.django_db


def state(client: APIClient, ticket: Ticket | str) -> dict[str, Any]:
    return client.get(url(ticket, "state")).json()


def test_the_agent_says_how_it_knows_each_item_and_a_settled_intent_is_the_tools_result(
    agent: APIClient, ticket: Ticket
) -> None:
    chat(ticket, 4)
    said = post_state(agent, ticket, '"1"', op="constraint_stated", text="email only", source="customer_turn")
    assert said.status_code == 200, said.json()
    version = said.json()["version"]
    inferred = post_state(agent, ticket, f'"{version}"', op="decision_made", text="refund, not replace",
                          source="agent_inference")  # fmt: skip
    assert inferred.status_code == 200
    assert post_action(agent, ticket, "r1", **REFUND, status="intended").status_code == 201
    assert agent.patch(url(ticket, "actions/A1"), {"status": "succeeded"}, format="json").status_code == 200

    pinned = state(agent, ticket)
    assert pinned["customer_constraints"][0]["source"] == "customer_turn"
    assert pinned["decisions"][0]["source"] == "agent_inference"
    assert pinned["actions_taken"][0]["source"] == "tool_result"


def test_an_unknown_source_or_one_only_the_desk_may_give_is_400(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    for source in ["hearsay", "supervisor_correction", "ledger_entry"]:
        response = post_state(agent, ticket, '"1"', op="constraint_stated", text="x", source=source)
        assert response.status_code == 400 and response.json()["error"] == "invalid"


def test_an_item_with_no_source_said_reads_as_before(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    assert post_state(agent, ticket, '"1"', op="constraint_stated", text="email only").status_code == 200
    assert "source" not in state(agent, ticket)["customer_constraints"][0]


def test_imported_events_keep_their_source(tmp_path: Path) -> None:
    doc = {
        "ticket_id": "T-7",
        "order_id": "SU-7",
        "seller_type": "marketplace",
        "ticket_class": {"slug": "tiny", "token_budget": 4000, "compaction_threshold": 0.8},
        "turns": [
            {"role": "customer", "content": "email me only",
             "events": [{"type": "constraint_stated", "text": "email only", "source": "customer_turn"}]},
            {"role": "tool_result", "tool": "issue_refund", "content": "ok",
             "events": [{"type": "action_taken", "tool": "issue_refund", "item": "lamp", "amount_cents": 100,
                         "source": "tool_result"}]},
        ],
    }  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    call_command("import_tickets", str(path))
    items = PinnedState.objects.select_related("ticket__ticket_class").get(ticket__ticket_id="T-7").items
    assert items.customer_constraints[0].source == "customer_turn"
    assert items.actions_taken[0].source == "tool_result"


def test_a_supervisors_correction_is_marked_as_one_and_the_page_shows_each_source(
    ticket: Ticket, supervisor_user: User
) -> None:
    chat(ticket, 2)
    by = Actor(kind=ActorKind.SUPERVISOR, user=supervisor_user)
    correct_state(ticket=ticket, by=by, reason="missed in the chat", expected_version=1,
                  op="action_added", tool="issue_refund", item="lamp", amount_cents=100)  # fmt: skip
    correct_state(ticket=ticket, by=by, reason="the buyer said so on the phone", expected_version=2,
                  op="constraint_stated", text="no calls after 6pm")  # fmt: skip
    items = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket).items
    assert items.actions_taken[0].source == "supervisor_correction"
    assert items.customer_constraints[0].source == "supervisor_correction"
    audit = StateChange.objects.filter(ticket=ticket, op="constraint_stated").get()
    assert audit.item_changes[0].after is not None
    assert audit.item_changes[0].after["source"] == "supervisor_correction"

    page = Client()
    page.force_login(supervisor_user)
    html = page.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    assert html.count('class="tag tag-source"') == 2 and "supervisor_correction</span>" in html
