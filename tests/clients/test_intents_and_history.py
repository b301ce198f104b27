"""Intents (reserve before the tool runs, settle after) and the history, through the client.

These wait for their endpoints (PATCH .../actions/{id}/ and GET .../history/) and run once they are routed.
"""

from __future__ import annotations

import pytest
from sundry_desk_client import BeliefStale, Conflict, DeskClient, RepeatRefused

from tests.clients.conftest import needs_history, needs_intents, open_t40118
from tickets.models import TicketClass

REFUND = {"tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}


@needs_intents
def test_an_intent_is_reserved_settled_once_and_settling_it_again_the_same_way_answers_the_same(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="Yes, $40 is fair. Please do.")
    reserved = client.reserve_intent(ticket_id, **REFUND, idempotency_key="rf-1")
    assert reserved.action.status == "intended" and client.state(ticket_id).refunded_cents_total == 0
    settled = client.settle_intent(ticket_id, reserved.action.id, succeeded=True)
    again = client.settle_intent(ticket_id, reserved.action.id, succeeded=True)
    assert settled.action.status == again.action.status == "succeeded"
    assert client.state(ticket_id).refunded_cents_total == 4000
    with pytest.raises(Conflict) as raised:
        client.settle_intent(ticket_id, reserved.action.id, succeeded=False, reason="changed my mind")
    assert raised.value.status == 409


@needs_intents
def test_a_second_intent_on_the_same_item_is_refused_naming_the_first_even_while_it_is_only_intended(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="Refund the table leg please.")
    first = client.reserve_intent(ticket_id, **REFUND)
    with pytest.raises(RepeatRefused) as raised:
        client.reserve_intent(ticket_id, **REFUND)
    assert raised.value.earlier_action["id"] == first.action.id
    assert raised.value.refunded_cents_total == 0


@needs_intents
def test_a_failed_intent_releases_the_item(client: DeskClient, standard_class: TicketClass) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="Refund the table leg please.")
    first = client.reserve_intent(ticket_id, **REFUND)
    failed = client.settle_intent(ticket_id, first.action.id, succeeded=False, reason="provider timed out")
    assert failed.action.status == "failed"
    second = client.reserve_intent(ticket_id, **REFUND)
    assert second.action.id != first.action.id and second.action.status == "intended"


@needs_intents
@needs_history
def test_the_history_is_newest_first_and_pages_through_everything(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    for i in range(30):
        client.append_turn(ticket_id, role="customer", content=f"message {i}")
    client.record_action(ticket_id, **REFUND)
    with pytest.raises(RepeatRefused):
        client.reserve_intent(ticket_id, **REFUND)
    first_page = client.history(ticket_id)
    entries = list(client.iter_history(ticket_id))
    assert len(entries) >= 32 and entries[: len(first_page.results)] == first_page.results
    assert "refus" in entries[0].text()  # the newest change is the refused attempt
    # The oldest changes come last: the ticket opened, then turn 1.
    assert any(e.kind == "turn" and '"number":1,' in e.text() for e in entries[-3:])


@needs_intents
def test_the_client_sends_the_agents_belief_and_a_stale_one_is_refused_before_the_tool_runs(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="Refund the table leg please.")
    believed = {"refunded_cents_total": client.state(ticket_id).refunded_cents_total}
    first = client.reserve_intent(ticket_id, **REFUND, expects=believed)
    client.settle_intent(ticket_id, first.action.id, succeeded=True)
    with pytest.raises(BeliefStale) as raised:
        client.reserve_intent(ticket_id, **{**REFUND, "item": "scratched leg"}, expects=believed)
    assert raised.value.actual == 4000
    assert [a["id"] for a in raised.value.body["actions"]] == [first.action.id]
