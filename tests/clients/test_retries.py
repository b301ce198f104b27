"""Retries through a proxy that drops connections, loses answers and answers 503, in front of a live desk.

A retried turn or action reuses its Idempotency-Key, so whatever the network did, it is stored once.
"""

from __future__ import annotations

import pytest
from sundry_desk_client import AsyncDeskClient, DeskClient, DeskUnavailable, ServerError

from tests.clients.conftest import open_t40118, run_async
from tests.clients.proxy import flaky_proxy
from tickets.models import PinnedState, Ticket, TicketClass, Turn


def turns_of(ticket_id: str) -> list[tuple[int, str]]:
    return list(
        Turn.objects.filter(ticket__ticket_id=ticket_id).order_by("number").values_list("number", "content")
    )


def test_a_turn_sent_on_a_dropped_connection_is_retried_and_stored_once(
    desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    with (
        flaky_proxy(desk_url, ["refuse"]) as proxy,
        DeskClient(proxy.url, desk_token, backoff=0.01) as client,
    ):
        open_t40118(client)
        answer = client.append_turn("T-40118", role="customer", content="The table leg is scratched.")
    assert proxy.seen[0] == "refuse" and answer.turn == 1 and not answer.replayed
    assert turns_of("T-40118") == [(1, "The table leg is scratched.")]


def test_a_turn_whose_answer_was_lost_is_retried_with_its_key_and_the_desk_replays_it(
    desk_url: str, desk_token: str, client: DeskClient, standard_class: TicketClass
) -> None:
    """The desk stored the turn but the answer never arrived: the retry gets the stored answer."""
    ticket_id = open_t40118(client)
    with (
        flaky_proxy(desk_url, ["lose_response"]) as proxy,
        DeskClient(proxy.url, desk_token, backoff=0.01) as flaky,
    ):
        answer = flaky.append_turn(ticket_id, role="customer", content="Please refund the $40.")
    assert proxy.requests_lost and b"Idempotency-Key" in proxy.requests_lost[0]
    assert answer.replayed and answer.turn == 1
    assert turns_of(ticket_id) == [(1, "Please refund the $40.")]


def test_an_action_whose_answer_was_lost_is_recorded_once(
    desk_url: str, desk_token: str, client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="Yes, $40 is fair.")
    with (
        flaky_proxy(desk_url, ["lose_response"]) as proxy,
        DeskClient(proxy.url, desk_token, backoff=0.01) as flaky,
    ):
        recorded = flaky.record_action(ticket_id, tool="issue_refund", item="garden-table", amount_cents=4000)
    assert proxy.seen[:2] == ["lose_response", "forward"]
    assert recorded.replayed and recorded.refunded_cents_total == 4000
    assert len(PinnedState.objects.get(ticket__ticket_id=ticket_id).items.actions_taken) == 1


def test_a_state_change_whose_answer_was_lost_is_not_applied_twice(
    desk_url: str, desk_token: str, client: DeskClient, standard_class: TicketClass
) -> None:
    """The retry meets 412 (the first attempt moved the version); the re-read state already has the change."""
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="I don't want a replacement.")
    with (
        flaky_proxy(desk_url, ["lose_response"]) as proxy,
        DeskClient(proxy.url, desk_token, backoff=0.01) as flaky,
    ):
        state = flaky.change_state(ticket_id, op="constraint_stated", text="no replacement wanted", version=1)
    assert proxy.seen[0] == "lose_response"
    assert [c.text for c in state.customer_constraints] == ["no replacement wanted"]
    assert state.version == 2 == PinnedState.objects.get(ticket__ticket_id=ticket_id).version


def test_opening_a_ticket_whose_answer_was_lost_returns_the_ticket(
    desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    with (
        flaky_proxy(desk_url, ["lose_response"]) as proxy,
        DeskClient(proxy.url, desk_token, backoff=0.01) as flaky,
    ):
        ticket = flaky.open_ticket(
            "T-40118", order_id="SU-87310", seller_type="marketplace", ticket_class="standard-8k"
        )
    assert proxy.seen[0] == "lose_response" and ticket.ticket_id == "T-40118"
    assert Ticket.objects.filter(ticket_id="T-40118").count() == 1


def test_a_503_is_retried_and_a_desk_that_stays_down_raises(
    desk_url: str, desk_token: str, client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    with (
        flaky_proxy(desk_url, ["503", "503"]) as proxy,
        DeskClient(proxy.url, desk_token, backoff=0.01) as flaky,
    ):
        assert flaky.get_ticket(ticket_id).ticket_id == ticket_id
    assert proxy.seen == ["503", "503", "forward"]
    with (
        flaky_proxy(desk_url, ["503"] * 3) as proxy,
        DeskClient(proxy.url, desk_token, retries=2, backoff=0.01) as flaky,
        pytest.raises(ServerError) as raised,
    ):
        flaky.get_ticket(ticket_id)
    assert raised.value.status == 503 and raised.value.attempts == 3
    assert raised.value.body == {"error": "unavailable", "message": "scripted outage"}


def test_a_desk_that_cannot_be_reached_raises_desk_unavailable_after_the_retries(
    desk_url: str, desk_token: str, client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    with (
        flaky_proxy(desk_url, ["refuse"] * 3) as proxy,
        DeskClient(proxy.url, desk_token, retries=2, backoff=0.01) as flaky,
        pytest.raises(DeskUnavailable) as raised,
    ):
        flaky.append_turn(ticket_id, role="customer", content="hello?")
    assert raised.value.attempts == 3 and raised.value.status is None
    assert proxy.seen == ["refuse"] * 3
    assert turns_of(ticket_id) == []


def test_the_async_client_retries_a_lost_answer_with_the_same_key(
    desk_url: str, desk_token: str, client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)

    async def talk(url: str) -> list[bool]:
        async with AsyncDeskClient(url, desk_token, backoff=0.01) as desk:
            first = await desk.append_turn(ticket_id, role="customer", content="Where is the parasol?")
            second = await desk.append_turn(
                ticket_id, role="agent", content="Checking.", boundary="reply_sent"
            )
            return [first.replayed, second.replayed]

    with flaky_proxy(desk_url, ["lose_response", "forward", "refuse"]) as proxy:
        replayed = run_async(talk(proxy.url))
    assert replayed[0] is True
    assert turns_of(ticket_id) == [(1, "Where is the parasol?"), (2, "Checking.")]
    assert "lose_response" in proxy.seen
