"""What a write validates, counted on pydantic's own validators on a state of 2,000 actions: the stored state
once (pydantic's one pass over the JSON text: building the items without it was measured twice as slow, see
the h39 report), then only the items the operation added or changed (core.state.validate_changes: a field
edited in place, such as a settle's external_ref, is checked before anything is written). After any sequence
of writes the stored state still validates whole and is what the API serves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from core.errors import InvalidInput
from core.identity import action_keys
from core.state import ActionItem, StateItems, TextItem, agent_state, items_to_data
from core.state_text import action_texts
from core.vocabulary import ActorKind
from tests.desk.api.conftest import url
from tests.desk.api.test_state_stored import validated
from tests.factories import chat, supervisor
from tickets.models import PinnedState, StateAction, StateActionKey, Ticket, TicketClass
from tickets.served_state import served_columns
from tickets.services.actions import record_action, settle_action
from tickets.services.actors import Actor
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state, correct_state

pytestmark = pytest.mark.django_db

ACTIONS = 2000


class CountingValidator:
    """A model's pydantic validator that counts the items each call validates (a state's: all its items)."""

    def __init__(self, inner: Any, model: type, counts: list[tuple[str, int]]) -> None:
        self._inner, self._model, self._counts = inner, model, counts

    def _count(self, data: Any) -> None:
        size = 1
        if self._model is StateItems:
            document = json.loads(data) if isinstance(data, str | bytes) else data
            size += sum(len(v) for v in document.values() if isinstance(v, list))
        self._counts.append((self._model.__name__, size))

    def validate_python(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        self._count(data)
        return self._inner.validate_python(data, *args, **kwargs)

    def validate_json(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        self._count(data)
        return self._inner.validate_json(data, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    counts: list[tuple[str, int]] = []
    for model in (StateItems, ActionItem, TextItem):
        validator = CountingValidator(model.__pydantic_validator__, model, counts)
        monkeypatch.setattr(model, "__pydantic_validator__", validator)
    yield counts


def items_validated(counts: list[tuple[str, int]]) -> int:
    return sum(size for _, size in counts)


@pytest.fixture
def long_state(standard_class: TicketClass) -> Ticket:
    """A ticket whose state holds 2,000 actions (succeeded, reversible, one a refund), stored as the services
    store one (items and agent-facing state at its version)."""
    ticket = open_ticket(ticket_id="T-\u2011LONG", order_id="SU-\u20119", seller_type="marketplace",
                         ticket_class=standard_class)  # fmt: skip
    chat(ticket, 4)
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)
    items = pinned.items
    for n in range(ACTIONS - 1):
        items.add_action(
            ActionItem(id="", tool="track_parcel", item=f"parcel-{n}", reversible=True, at_turn=2)
        )
    items.add_action(ActionItem(id="", tool="issue_refund", item="lamp", amount_cents=400, at_turn=3))
    pinned.version += 1
    pinned.data = items_to_data(items)
    pinned.action_count, pinned.action_figures = items.action_count, items.figures.as_json()
    document = agent_state(
        ticket=ticket.ticket_id,
        order=ticket.order_id,
        seller_type=ticket.seller_type,
        version=pinned.version,
        items=items,
    )
    for column, value in served_columns(document).items():
        setattr(pinned, column, value)
    pinned.save()
    for action in items.actions_taken:
        stored = action.model_dump(mode="json")
        served, served_model = action_texts(stored)
        number = int(action.id[1:])
        StateAction.objects.create(
            state=pinned, number=number, data=stored, served=served, served_model=served_model
        )
        for key in action_keys(action.item, action.args):
            StateActionKey.objects.create(state=pinned, number=number, key=key)
    return ticket


def test_writes_on_a_long_state_validate_the_state_once_and_the_items_they_change(
    long_state: Ticket, validations: list[tuple[str, int]]
) -> None:
    ticket = long_state
    sam = Actor(kind=ActorKind.SUPERVISOR, user=supervisor())
    version = PinnedState.objects.get(ticket=ticket).version
    writes = {
        "action": lambda: record_action(
            ticket=ticket, tool="track_parcel", item="parcel-new", reversible=True, idempotency_key="a"
        ),
        "intent": lambda: record_action(
            ticket=ticket,
            tool="issue_refund",
            item="mug",
            amount_cents=300,
            idempotency_key="i",
            status="intended",
        ),
        "settle": lambda: settle_action(ticket=ticket, action_id=f"A{ACTIONS + 2}", status="succeeded"),
        "constraint": lambda: change_state(ticket=ticket, op="constraint_stated", text="Email only"),
        "reversal": lambda: correct_state(
            ticket=ticket,
            by=sam,
            reason="the refund bounced",
            expected_version=version + 4,
            op="action_reversed",
            target_id=f"A{ACTIONS}",
        ),
        "replay": lambda: record_action(
            ticket=ticket, tool="track_parcel", item="parcel-new", reversible=True, idempotency_key="a"
        ),
    }
    for name, write in writes.items():
        validations.clear()
        write()
        # The stored state once, then the new or changed item (built, then checked as stored): a handful more.
        states = [size for model, size in validations if model == "StateItems"]
        assert len(states) == (0 if name == "replay" else 1), (name, validations)
        if name != "replay":
            assert 0 < items_validated(validations) - states[0] <= 3, (name, validations)
    assert items_validated(validations) == 0  # a replay validates nothing

    # The state these writes left validates whole, and is what is stored to be served.
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)
    assert pinned.version == version + 5
    items = pinned.items
    assert len(items.actions_taken) == ACTIONS + 2
    assert items.find_action(f"A{ACTIONS + 2}").status == "succeeded"
    assert items.find_action(f"A{ACTIONS}").reversed
    assert items.refunded_cents_total == 300
    assert pinned.served_text() == json.dumps(validated(ticket), ensure_ascii=False, separators=(",", ":"))


def test_a_changed_item_that_breaks_its_model_is_refused_and_nothing_is_written(
    ticket: Ticket, agent: APIClient
) -> None:
    record_action(ticket=ticket, tool="issue_refund", item="lamp", amount_cents=100, idempotency_key="r",
                  status="intended")  # fmt: skip
    before = PinnedState.objects.get(ticket=ticket)
    with pytest.raises(InvalidInput) as error:
        settle_action(ticket=ticket, action_id="A1", status="succeeded", external_ref="p" * 201)
    assert "external_ref" in error.value.message
    after = PinnedState.objects.get(ticket=ticket)
    assert (after.version, after.data) == (before.version, before.data)
    assert agent.get(url(ticket, "state")).json() == validated(ticket)
