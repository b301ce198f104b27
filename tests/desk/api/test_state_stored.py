"""The agent-facing state is stored with every version (PinnedState.served_*, edited in place by the services)
and served as stored: for every version of a ticket built through the services, the state GET and the context
serve exactly what validating the items and dumping them would (keys in the same order: the tokens were counted
on it), and no read validates the items."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from core.state import ActionFigures, StateItems, agent_state, model_state
from core.vocabulary import ActorKind
from tests.desk.api.conftest import url
from tests.factories import chat, supervisor
from tickets.models import (
    SERVED_COLUMNS,
    SERVED_TAIL,
    PinnedState,
    StateAction,
    StateActionKey,
    Ticket,
    TicketClass,
)
from tickets.services.actions import record_action, settle_action
from tickets.services.actors import Actor
from tickets.services.classes import save_ticket_class
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state, correct_state

pytestmark = pytest.mark.django_db


def validated(ticket: Ticket) -> dict[str, Any]:
    """What the API served before states were stored: the items validated by pydantic, then dumped."""
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)
    actions = [row.data for row in pinned.action_rows.all()]
    items = StateItems.load(pinned.data, tools=ticket.ticket_class.tool_catalog, actions=actions)
    return agent_state(
        ticket=ticket.ticket_id,
        order=ticket.order_id,
        seller_type=ticket.seller_type,
        version=pinned.version,
        items=items,
    )


def version_of(ticket: Ticket) -> int:
    return PinnedState.objects.values_list("version", flat=True).get(ticket=ticket)


def every_kind_of_change(ticket: Ticket) -> Iterator[str]:
    """Changes through the services, one at a time: each yields what it did."""
    sam = Actor(kind=ActorKind.SUPERVISOR, user=supervisor())

    def state(op: str, text: str, **extra: Any) -> None:
        change_state(ticket=ticket, op=op, text=text, expected_version=version_of(ticket), **extra)

    def correct(op: str, **extra: Any) -> None:
        correct_state(ticket=ticket, by=sam, reason="seen in the call", expected_version=version_of(ticket),
                      op=op, **extra)  # fmt: skip

    yield "opened"
    state("constraint_stated", "Email only \u2011 no calls", source="customer_turn")
    yield "constraint"
    state("question_opened", "Which parcel? the \u2011blue one or the red one")
    yield "question"
    state("question_opened", "Refund to card?")
    yield "second question"
    state("decision_made", "No replacement: the buyer declined")
    yield "decision"
    record_action(ticket=ticket, tool="issue_refund", item="lamp", amount_cents=1250, idempotency_key="r1",
                  status="intended", args={"zeta": 1, "alpha": [1, 2], "reason": "x"})  # fmt: skip
    yield "intent"
    settle_action(ticket=ticket, action_id="A1", status="succeeded", external_ref="pay_\u20111")
    yield "settled (a total moves)"
    record_action(ticket=ticket, tool="track_parcel", item="parcel-1", reversible=True, idempotency_key="t1")
    yield "reversible action"
    record_action(ticket=ticket, tool="issue_refund", item="mug", amount_cents=300, idempotency_key="r2",
                  status="intended")  # fmt: skip
    yield "second intent"
    settle_action(ticket=ticket, action_id="A3", status="failed", reason="card declined")
    yield "failed intent"
    state("question_resolved", "Q1")
    yield "question resolved (removed)"
    correct("constraint_edited", target_id="C1", text="Email only, never SMS")
    yield "constraint edited"
    correct("action_reversed", target_id="A1")
    yield "action reversed (a total moves back)"
    correct("action_added", tool="issue_refund", item="lamp", amount_cents=500, external_ref="led-9")
    yield "missed action added"
    record_action(ticket=ticket, tool="send_certificate", item="", amount_cents=700, idempotency_key="c1",
                  repeat_of_earlier=True, reason="a goodwill credit on top of the refund")  # fmt: skip
    yield "credit"
    state("question_resolved", "Refund to card?")
    yield "last question resolved"


@pytest.fixture
def busy(standard_class: TicketClass) -> Ticket:
    ticket = open_ticket(ticket_id="T-\u2011S", order_id="SU-\u20111", seller_type="marketplace",
                         ticket_class=standard_class)  # fmt: skip
    chat(ticket, 4)
    return ticket


def test_every_version_is_served_as_the_validated_dump(agent: APIClient, busy: Ticket) -> None:
    seen = []
    for what in every_kind_of_change(busy):
        expected = validated(busy)
        response = agent.get(url(busy, "state"))
        assert response.status_code == 200, what
        served = json.loads(response.content)
        # The same document, keys in the same order (what its tokens were counted on), at this version.
        assert json.dumps(served) == json.dumps(expected), what
        assert response["ETag"] == f'"{expected["version"]}"'
        context = agent.get(url(busy, "context")).json()
        assert json.dumps(context["pinned_state"]) == json.dumps(model_state(expected)), what
        stored = PinnedState.objects.get(ticket=busy)
        assert stored.served_version == stored.version and stored.served_text() is not None, what
        seen.append(expected["version"])
    assert seen == list(range(1, len(seen) + 1)) and len(seen) > 14
    assert served["refunded_cents_total"] == 500 and served["credited_cents_total"] == 700
    assert served["open_questions"] == [] and served["actions_taken"][0]["args"] == {"zeta": 1, "alpha": [1, 2],
                                                                                      "reason": "x"}  # fmt: skip


def test_a_read_validates_nothing(agent: APIClient, busy: Ticket, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in every_kind_of_change(busy):
        pass
    expected = validated(busy)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a read validated the state")

    monkeypatch.setattr(StateItems, "model_validate", refuse)
    monkeypatch.setattr(StateItems, "model_validate_json", refuse)
    assert agent.get(url(busy, "state")).json() == expected
    assert agent.get(url(busy, "context")).json()["pinned_state"] == model_state(expected)


def test_a_state_with_none_stored_is_built_from_its_items_and_stored_by_its_next_change(
    agent: APIClient, busy: Ticket, standard_class: TicketClass
) -> None:
    """A row written otherwise (raw SQL, a bench's fixture) or made stale behind the services: never served stale."""
    change_state(ticket=busy, op="decision_made", text="Keep the lamp")
    PinnedState.objects.filter(ticket=busy).update(served_version=None)
    assert agent.get(url(busy, "state")).json() == validated(busy)
    change_state(ticket=busy, op="decision_made", text="And the mug")
    stored = PinnedState.objects.select_related("ticket").get(ticket=busy)
    assert stored.served_version == stored.version and json.loads(stored.served_text() or "") == validated(
        busy
    )
    # The items changed behind the services, the version with them: the stored copy is of another version.
    pinned = PinnedState.objects.get(ticket=busy)
    data = dict(pinned.data, decisions=pinned.data["decisions"][:1])
    PinnedState.objects.filter(ticket=busy).update(data=data, version=pinned.version + 1)
    assert agent.get(url(busy, "state")).json() == validated(busy)
    assert len(validated(busy)["decisions"]) == 1


def test_a_new_tool_catalog_is_seen_in_the_totals_at_once(
    agent: APIClient, busy: Ticket, standard_class: TicketClass
) -> None:
    record_action(ticket=busy, tool="goodwill_voucher", item="lamp", amount_cents=900, idempotency_key="v1")
    assert agent.get(url(busy, "state")).json()["credited_cents_total"] == 0
    standard_class.money_tools = {**standard_class.money_tools, "goodwill_voucher": "credit"}
    save_ticket_class(ticket_class=standard_class, by=None, reason="vouchers are credit")
    served = agent.get(url(busy, "state")).json()
    assert served["credited_cents_total"] == 900
    assert served == validated(busy)


def test_the_migration_moves_the_actions_of_the_states_already_there_into_rows(
    agent: APIClient, busy: Ticket
) -> None:
    """tickets.0024: a state kept as the previous release kept it (its actions inside `data`, no rows, no
    figures) gets its rows, keys, count and figures, and is served as it was."""
    migration = importlib.import_module("tickets.migrations.0024_h47_action_rows")
    for _ in every_kind_of_change(busy):
        pass
    expected = validated(busy)
    pinned = PinnedState.objects.get(ticket=busy)
    old = {**pinned.data, "actions_taken": [row.data for row in pinned.action_rows.all()]}
    keys = StateActionKey.objects.filter(state=pinned).count()
    StateActionKey.objects.filter(state=pinned).delete()
    StateAction.objects.filter(state=pinned).delete()
    PinnedState.objects.filter(pk=pinned.pk).update(data=old, action_count=0, action_figures={})
    migration.move_actions_to_rows(apps, None)
    moved = PinnedState.objects.select_related("ticket__ticket_class").get(pk=pinned.pk)
    assert "actions_taken" not in moved.data and moved.action_count == len(old["actions_taken"]) > 1
    assert moved.action_figures == ActionFigures.of(moved.items.actions_taken).as_json() != {}
    assert StateActionKey.objects.filter(state=pinned).count() == keys
    response = agent.get(url(busy, "state"))
    assert not hasattr(response, "data")  # served from the texts, past DRF
    assert response.content == JSONRenderer().render(expected)


def test_the_ticket_detail_reads_neither_the_items_nor_the_stored_state(
    agent: APIClient, busy: Ticket
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    change_state(ticket=busy, op="decision_made", text="Keep the lamp")
    with CaptureQueriesContext(connection) as queries:
        body = agent.get(url(busy)).json()
    assert body["state_version"] == version_of(busy)
    state_reads = [q["sql"] for q in queries.captured_queries if 'FROM "tickets_pinnedstate"' in q["sql"]]
    assert state_reads
    texts = [*SERVED_COLUMNS.values(), SERVED_TAIL]
    assert all('"tickets_pinnedstate"."data"' not in sql for sql in state_reads)
    assert all(f'"{column}"' not in sql for sql in state_reads for column in texts)
