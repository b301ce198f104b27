"""GET and POST /api/v1/tickets/{id}/state/: ETag is the version; changes need If-Match."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from core.vocabulary import ActorKind, StateOp
from tests.desk.api.conftest import post_state, url
from tests.factories import chat
from tickets.models import PinnedState, StateChange, Ticket

pytestmark = pytest.mark.django_db


def test_state_carries_its_version_as_etag_and_answers_304_while_unchanged(
    agent: APIClient, ticket: Ticket
) -> None:
    first = agent.get(url(ticket, "state"))
    assert first.status_code == 200
    assert first["ETag"] == '"1"'
    assert first.json()["version"] == 1 and first.json()["ticket"] == "T-1"

    unchanged = agent.get(url(ticket, "state"), HTTP_IF_NONE_MATCH='"1"')
    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged["ETag"] == '"1"'

    chat(ticket, 3)
    post_state(agent, ticket, '"1"', op="constraint_stated", text="no replacement wanted", at_turn=3)
    changed = agent.get(url(ticket, "state"), HTTP_IF_NONE_MATCH='"1"')
    assert changed.status_code == 200
    assert changed["ETag"] == '"2"'


@pytest.mark.parametrize(
    ("op", "text", "field"),
    [
        ("constraint_stated", "no replacement wanted", "customer_constraints"),
        ("question_opened", "photo of the parasol still outstanding", "open_questions"),
        ("decision_made", "keep the table with a partial refund", "decisions"),
    ],
)
def test_a_state_change_with_the_current_etag_is_pinned_and_audited_as_the_agent(
    agent: APIClient, ticket: Ticket, op: str, text: str, field: str
) -> None:
    chat(ticket, 3)
    response = post_state(agent, ticket, '"1"', op=op, text=text, at_turn=2)
    assert response.status_code == 200
    assert response["ETag"] == '"2"'
    assert response.json()[field] == [{"id": response.json()[field][0]["id"], "at_turn": 2, "text": text}]
    change = StateChange.objects.get(ticket=ticket, op=op)
    assert change.actor_kind == ActorKind.AGENT and change.actor is not None
    assert change.actor.username == "agent-smith"


def test_resolving_a_question_by_its_id_removes_it(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    post_state(agent, ticket, '"1"', op="question_opened", text="photo still outstanding")
    response = post_state(agent, ticket, '"2"', op="question_resolved", text="Q1")
    assert response.status_code == 200
    assert response.json()["open_questions"] == []
    missing = post_state(agent, ticket, '"3"', op="question_resolved", text="Q9")
    assert missing.status_code == 400 and "Q9" in missing.json()["message"]


def test_a_state_change_without_if_match_is_answered_428(agent: APIClient, ticket: Ticket) -> None:
    response = post_state(agent, ticket, None, op="decision_made", text="refund")
    assert response.status_code == 428
    assert "If-Match" in response.json()["message"]
    assert PinnedState.objects.get(ticket=ticket).version == 1


def test_a_state_change_with_a_stale_etag_is_answered_412_with_the_current_state(
    agent: APIClient, ticket: Ticket
) -> None:
    assert post_state(agent, ticket, '"1"', op="decision_made", text="first").status_code == 200
    stale = post_state(agent, ticket, '"1"', op="decision_made", text="second, from an old read")
    assert stale.status_code == 412
    body = stale.json()
    assert body["error"] == "stale_version" and body["current_version"] == 2
    assert [d["text"] for d in body["current_state"]["decisions"]] == ["first"]
    assert StateChange.objects.filter(ticket=ticket, op=StateOp.DECISION_MADE).count() == 1


@pytest.mark.parametrize("if_match", ["1", "*", 'W/"1"', '"one"', '"1", "2"'])
def test_a_malformed_if_match_is_answered_400(agent: APIClient, ticket: Ticket, if_match: str) -> None:
    response = post_state(agent, ticket, if_match, op="decision_made", text="refund")
    assert response.status_code == 400
    assert "If-Match" in response.json()["message"]


def test_an_unknown_op_or_field_is_answered_400(agent: APIClient, ticket: Ticket) -> None:
    assert post_state(agent, ticket, '"1"', op="action_taken", text="x").status_code == 400
    unknown = post_state(agent, ticket, '"1"', op="decision_made", text="x", version=1)
    assert unknown.status_code == 400 and "version" in unknown.json()["fields"]
