"""The state and the context an agent reads on every turn are served from the state's stored texts
(tickets.served_state, desk.api.fast_reads): byte for byte what DRF renders from the validated items, at every
version; edited item by item by the database; never served wrong when a text is not what the edit expected."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from core.state import model_state
from tests.desk.api.conftest import url
from tests.desk.api.test_state_stored import busy, every_kind_of_change, validated  # noqa: F401
from tickets.accounts import revoke_agent_tokens
from tickets.models import PinnedState, Ticket
from tickets.services.actions import record_action
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db


def rendered(document: Any) -> bytes:
    return JSONRenderer().render(document)


def past_drf(response: Any) -> bool:
    """Answered by desk.api.fast_reads (a plain HttpResponse) rather than by DRF (a Response with `.data`)."""
    return not hasattr(response, "data")


def test_every_version_is_served_byte_for_byte_as_drf_renders_the_validated_items(
    agent: APIClient,
    supervisor: APIClient,
    busy: Ticket,  # noqa: F811
) -> None:
    for what in every_kind_of_change(busy):
        expected = validated(busy)
        fast = agent.get(url(busy, "state"))
        assert fast.status_code == 200 and past_drf(fast), what
        assert fast.content == rendered(expected), what
        assert fast["Content-Type"] == "application/json" and fast["ETag"] == f'"{expected["version"]}"'
        # A person's session takes DRF's whole way: the same bytes and headers.
        slow = supervisor.get(url(busy, "state"))
        assert not past_drf(slow) and slow.content == fast.content, what
        assert slow["Allow"] == fast["Allow"] and slow["ETag"] == fast["ETag"]

        context = agent.get(url(busy, "context"))
        assert past_drf(context), what
        assert context.content == supervisor.get(url(busy, "context")).content, what
        # The state inside the context, as the model reads it, byte for byte.
        assert rendered(model_state(expected)).decode() in context.content.decode(), what
        assert json.loads(context.content)["pinned_state"] == model_state(expected), what
        stored = PinnedState.objects.get(ticket=busy)
        assert stored.served_version == stored.version, what


def test_a_change_writes_its_own_item_only(busy: Ticket, settings: Any) -> None:  # noqa: F811
    """An action is a row of its own: recording one neither reads back nor writes the earlier ones."""
    settings.DATABASE_PREPARED_STATEMENTS = False  # bound on the client: the values are in the logged SQL
    record_action(ticket=busy, tool="issue_refund", item="lamp", amount_cents=100, idempotency_key="k1")
    with CaptureQueriesContext(connection) as queries:
        record_action(ticket=busy, tool="issue_refund", item="mug", amount_cents=200, idempotency_key="k2")
    [write] = [q["sql"] for q in queries.captured_queries if 'INSERT INTO "tickets_stateaction"' in q["sql"]]
    assert "mug" in write and "lamp" not in write
    # A text list's item is edited by the database, not sent whole.
    change_state(ticket=busy, op="decision_made", text="Keep the lamp")
    with CaptureQueriesContext(connection) as queries:
        change_state(ticket=busy, op="decision_made", text="Ship the mug")
    [update] = [q["sql"] for q in queries.captured_queries if 'UPDATE "tickets_pinnedstate"' in q["sql"]]
    assert '"served_decisions" =' in update and "Keep the lamp" not in update


def test_a_text_that_is_not_what_the_edit_expected_is_dropped_never_served_wrong(
    agent: APIClient,
    busy: Ticket,  # noqa: F811
) -> None:
    change_state(ticket=busy, op="question_opened", text="Which lamp?")
    # Someone rewrote the served text behind the services (same version): the resolution's edit cannot find
    # the question's old text in it.
    PinnedState.objects.filter(ticket=busy).update(served_questions='{"id":"Q1","text":"forged"}')
    change_state(ticket=busy, op="question_resolved", text="Which lamp?")
    stored = PinnedState.objects.get(ticket=busy)
    assert stored.served_questions is None or stored.served_questions == ""
    response = agent.get(url(busy, "state"))
    assert response.status_code == 200 and not past_drf(response)  # built from the items, by DRF's way
    assert response.json() == validated(busy) and response.json()["open_questions"] == []
    # The next change writes the texts in full again, and the fast way serves them.
    change_state(ticket=busy, op="decision_made", text="Keep the lamp", expected_version=stored.version)
    again = agent.get(url(busy, "state"))
    assert past_drf(again) and again.content == rendered(validated(busy))


def test_the_fast_way_answers_a_matching_etag_with_304(agent: APIClient, busy: Ticket) -> None:  # noqa: F811
    version = validated(busy)["version"]
    response = agent.get(url(busy, "state"), HTTP_IF_NONE_MATCH=f'"{version}"')
    assert response.status_code == 304 and past_drf(response) and response.content == b""
    assert response["ETag"] == f'"{version}"'
    assert agent.get(url(busy, "state"), HTTP_IF_NONE_MATCH=f'"{version - 1}"').status_code == 200


def test_anything_but_a_plain_agent_read_takes_drf_s_way(
    agent: APIClient,
    agent_token: str,
    busy: Ticket,  # noqa: F811
) -> None:
    assert APIClient().get(url(busy, "state")).status_code == 401
    bad = APIClient(HTTP_AUTHORIZATION="Token not-a-token-at-all")
    assert bad.get(url(busy, "state")).status_code == 401
    assert bad.get(url(busy, "state")).json()["error"]
    missing = agent.get("/api/v1/tickets/T-NOPE/state/")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert agent.get("/api/v1/tickets/T-NOPE/context/").status_code == 404
    revoke_agent_tokens(prefix=agent_token[:12])
    from tickets.accounts import TOKEN_CACHE

    TOKEN_CACHE.clear()
    assert agent.get(url(busy, "state")).status_code == 401
    assert agent.get(url(busy, "context")).status_code == 401
