"""DeskClient against a live desk over HTTP: tickets, turns, context, state with If-Match, actions, errors."""

from __future__ import annotations

import pytest
from sundry_desk_client import (
    DeskClient,
    Forbidden,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    RepeatRefused,
    StaleVersion,
    TicketExists,
    Unauthorized,
)

from tests.clients.conftest import open_t40118
from tickets.accounts import create_person, issue_agent_token
from tickets.models import PinnedState, Ticket, TicketClass, Turn

REFUND = {"tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}


def test_open_and_get_a_ticket_answers_models_with_token_figures(
    client: DeskClient, standard_class: TicketClass
) -> None:
    opened = client.open_ticket(
        "T-40118", order_id="SU-87310", seller_type="marketplace", ticket_class="standard-8k"
    )
    assert (opened.ticket_id, opened.order_id, opened.state_version, opened.turn_count) == (
        "T-40118",
        "SU-87310",
        1,
        0,
    )
    fetched = client.get_ticket("T-40118")
    assert fetched.token_budget == 8000 and fetched.threshold_tokens == 6400
    assert (
        fetched.tokens.total
        == fetched.tokens.system
        + fetched.tokens.state
        + fetched.tokens.summary
        + fetched.tokens.turns
        + fetched.tokens.framing
    )


def test_opening_a_ticket_twice_raises_ticket_exists(client: DeskClient, standard_class: TicketClass) -> None:
    open_t40118(client)
    with pytest.raises(TicketExists) as raised:
        open_t40118(client)
    assert raised.value.status == 409 and raised.value.code == "ticket_exists"


def test_a_turn_answers_its_number_tokens_and_what_compaction_did(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    first = client.append_turn(ticket_id, role="customer", content="The garden table leg is scratched.")
    second = client.append_turn(
        ticket_id, role="agent", content="Sorry! A photo, please?", boundary="reply_sent"
    )
    assert (first.turn, second.turn) == (1, 2)
    assert second.compaction.status == "not_due" and not second.replayed
    assert second.context_tokens > first.context_tokens and second.threshold_tokens == 6400
    turns = list(
        Turn.objects.filter(ticket__ticket_id=ticket_id).order_by("number").values_list("role", "boundary")
    )
    assert turns == [("customer", ""), ("agent", "reply_sent")]


def test_the_same_idempotency_key_stores_a_turn_once_and_says_it_replayed(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    first = client.append_turn(ticket_id, role="customer", content="hello", idempotency_key="t-1")
    again = client.append_turn(ticket_id, role="customer", content="hello", idempotency_key="t-1")
    assert again.replayed and not first.replayed and again.turn == first.turn == 1
    assert Turn.objects.filter(ticket__ticket_id=ticket_id).count() == 1
    with pytest.raises(IdempotencyConflict) as raised:
        client.append_turn(ticket_id, role="customer", content="something else", idempotency_key="t-1")
    assert raised.value.status == 422 and "t-1" in raised.value.message


def test_turns_without_a_key_are_separate_turns_even_with_the_same_text(
    client: DeskClient, standard_class: TicketClass
) -> None:
    """Each call gets its own key: a customer who says "yes" twice said it twice."""
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="yes")
    client.append_turn(ticket_id, role="customer", content="yes")
    assert Turn.objects.filter(ticket__ticket_id=ticket_id).count() == 2


def test_tool_turns_with_args_ids_and_an_empty_result_come_back_in_the_context(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="Where is my parasol?")
    client.append_turn(
        ticket_id, role="tool_call", tool="track_parcel", args={"order": "SU-87311"}, tool_call_id="call_2"
    )
    client.append_turn(ticket_id, role="tool_result", tool="track_parcel", tool_call_id="call_2", content="")
    context = client.context(ticket_id)
    assert [(t.number, t.role) for t in context.turns] == [
        (1, "customer"),
        (2, "tool_call"),
        (3, "tool_result"),
    ]
    assert context.turns[1].args == {"order": "SU-87311"} and context.turns[2].content == ""
    assert context.summary is None and context.pinned_state.ticket == ticket_id
    assert context.tokens.total <= context.token_budget


def test_a_state_change_with_a_stale_version_is_reread_and_applied(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="No replacement, please.")
    stale = client.state(ticket_id).version
    client.change_state(ticket_id, op="question_opened", text="Was the parasol shipped?", version=stale)
    # `stale` is now one behind: the client gets 412, reads the state again and applies the change.
    after = client.change_state(
        ticket_id, op="constraint_stated", text="no replacement wanted", at_turn=1, version=stale
    )
    assert after.version == stale + 2
    assert [c.text for c in after.customer_constraints] == ["no replacement wanted"]
    assert [q.text for q in after.open_questions] == ["Was the parasol shipped?"]


def test_a_state_change_that_stays_stale_raises_stale_version_after_its_attempts(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    with pytest.raises(StaleVersion) as raised:
        client.change_state(ticket_id, op="decision_made", text="refund $40", version=99, max_attempts=1)
    assert raised.value.status == 412
    assert PinnedState.objects.get(ticket__ticket_id=ticket_id).version == 1


def test_an_action_is_recorded_once_per_key_and_a_repeat_is_refused_naming_the_earlier(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    for _ in range(6):
        client.append_turn(ticket_id, role="customer", content="...")
    recorded = client.record_action(ticket_id, **REFUND, at_turn=6, idempotency_key="T-40118-rf-1")
    replay = client.record_action(ticket_id, **REFUND, at_turn=6, idempotency_key="T-40118-rf-1")
    assert replay.replayed and replay.action.id == recorded.action.id == "A1"
    assert recorded.refunded_cents_total == 4000
    with pytest.raises(RepeatRefused) as raised:
        client.record_action(ticket_id, **{**REFUND, "amount_cents": 3999})
    refused = raised.value
    assert refused.status == 409 and refused.code == "repeat_refused"
    assert refused.earlier_action["id"] == "A1" and refused.earlier_action["at_turn"] == 6
    assert refused.refunded_cents_total == 4000
    deliberate = client.record_action(
        ticket_id, **REFUND, repeat_of_earlier=True, reason="second scratch found"
    )
    assert deliberate.action.repeat_of == "A1" and deliberate.refunded_cents_total == 8000


def test_a_bad_body_raises_invalid_request_with_the_fields(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    with pytest.raises(InvalidRequest) as raised:
        client.append_turn(ticket_id, role="narrator", content="once upon a time")
    assert raised.value.status == 400 and "role" in raised.value.fields


def test_an_unknown_ticket_raises_not_found(client: DeskClient, transactional_db: None) -> None:
    with pytest.raises(NotFound) as raised:
        client.context("T-nope")
    assert raised.value.status == 404 and raised.value.body["error"] == "not_found"


def test_a_bad_token_raises_unauthorized(desk_url: str, transactional_db: None) -> None:
    with DeskClient(desk_url, "not-a-token") as stranger, pytest.raises(Unauthorized) as raised:
        stranger.get_ticket("T-40118")
    assert raised.value.status == 401


def test_a_supervisor_token_cannot_write_and_raises_forbidden(
    desk_url: str, standard_class: TicketClass, client: DeskClient
) -> None:
    ticket_id = open_t40118(client)
    sally = create_person(username="sally", password="correct-horse-battery", role="supervisor")
    key = issue_agent_token(user=sally)
    with DeskClient(desk_url, key) as supervisor:
        assert supervisor.get_ticket(ticket_id).ticket_id == ticket_id  # supervisors read
        with pytest.raises(Forbidden) as raised:
            supervisor.append_turn(ticket_id, role="customer", content="hi")
    assert raised.value.status == 403 and "agents" in raised.value.message
    assert not Turn.objects.filter(ticket__ticket_id=ticket_id).exists()


def test_the_base_url_may_name_the_api_root(
    desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    with DeskClient(desk_url + "/api/v1/", desk_token) as rooted:
        rooted.open_ticket("T-2", order_id="SU-2", seller_type="retail", ticket_class="standard-8k")
        assert Ticket.objects.filter(ticket_id="T-2").exists()
        assert rooted.set_status("T-2", "waiting").status == "waiting"


def test_compactions_are_listed_as_models(client: DeskClient, small_class: TicketClass) -> None:
    ticket_id = open_t40118(client, ticket_class="small-1k")
    for i in range(12):
        client.append_turn(ticket_id, role="customer", content=f"The parasol is still missing, day {i}. " * 4)
        client.append_turn(
            ticket_id,
            role="agent",
            content=f"I am checking with the carrier, update {i}.",
            boundary="reply_sent",
        )
    events = [e for e in client.compactions(ticket_id) if e.status in ("applied", "forced")]
    assert events, "the small class compacts"
    assert events[0].replaced_turns and events[0].replaced_turns[0] == 1
    assert client.get_ticket(ticket_id).first_active_turn > 1
