"""A state's actions are rows of their own: one action's write reads only the actions it can touch, and the
guard, the money figures and the ids it decides with are those of the whole state."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.errors import DeskError
from core.identity import action_keys
from core.state import ActionFigures, ActionItem
from core.state_text import action_texts
from tests.factories import chat
from tickets.action_rows_sql import ACTIONS_TABLE, KEYS_TABLE, action_number
from tickets.errors import RepeatRefused
from tickets.models import PinnedState, StateAction, StateActionKey, Ticket, TicketClass
from tickets.services.actions import record_action, settle_action
from tickets.services.actors import Actor
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import correct_state
from tickets.state_actions import touched_actions

pytestmark = pytest.mark.django_db


def whole_state(ticket: Ticket) -> PinnedState:
    return PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)


# Tools spelled as real agents spell them: another refund tool, a typographic hyphen, a credit, a charge, a
# reversible lookup and an irreversible non-money tool.
TOOLS = ["issue_refund", "Issue\u2011Refund", "refund_order", "send_certificate", "charge_card", "cancel_order",
         "track_parcel"]  # fmt: skip
ITEMS = ["garden-table", "Garden Table", "mirror", "mirrors", "", "lamp"]


def test_the_guard_on_action_rows_decides_as_the_whole_state_would() -> None:
    """For 120 random actions, settles and reversals (tools and items spelled inconsistently, items in args,
    whole-order actions), each new action is refused exactly when the whole state's guard names an earlier
    action, and the stored count and figures are the whole state's after every step."""
    klass = TicketClass.objects.create(slug="rows", token_budget=2_000_000, compaction_threshold=1.0)
    ticket = open_ticket(ticket_id="T-ROWS", order_id="SU-R", seller_type="marketplace", ticket_class=klass)
    chat(ticket, 2)
    supervisor = Actor(kind="supervisor", user=None)
    rng = random.Random(40118)
    refused = recorded = 0
    for n in range(120):
        whole = whole_state(ticket)
        items = whole.items
        tool, item = rng.choice(TOOLS), rng.choice(ITEMS)
        args = {"item_ids": [rng.choice(ITEMS[:4])]} if not item and rng.random() < 0.5 else {}
        expected = items.earlier_irreversible(tool=tool, item=item, args=args)
        status = rng.choice(["intended", "succeeded"])
        try:
            answer = record_action(
                ticket=ticket.ticket_id, tool=tool, item=item, args=args, amount_cents=100 * (n % 7 + 1),
                idempotency_key=f"k{n}", status=status,
            )  # fmt: skip
        except RepeatRefused as error:
            refused += 1
            assert expected is not None, (
                f"step {n}: refused {tool} {item!r} {args}, the whole state allows it"
            )
            assert error.detail["earlier_action"]["id"] == expected.id
        else:
            recorded += 1
            # A reversible tool is never held; an irreversible one is allowed only with no earlier holder.
            assert expected is None or answer.action["reversible"], f"step {n}: {tool} {item!r} allowed"
            if status == "intended" and rng.random() < 0.7:
                outcome = rng.choice(["succeeded", "failed"])
                settle_action(
                    ticket=ticket.ticket_id, action_id=answer.action["id"], status=outcome, reason="r"
                )
        current = whole_state(ticket)
        held = [a for a in current.items.actions_taken if not a.reversed]
        if held and rng.random() < 0.1:
            correct_state(
                ticket=ticket, by=supervisor, reason="never went through", expected_version=current.version,
                op="action_reversed", target_id=rng.choice(held).id,
            )  # fmt: skip
        after = whole_state(ticket)
        actions = after.items.actions_taken
        assert after.action_count == len(actions) == max([0, *(int(a.id[1:]) for a in actions)])
        assert ActionFigures(after.action_figures).by_tool == ActionFigures.of(actions).by_tool
    assert refused > 10 and recorded > 10  # the run exercised both ways


def test_reversals_and_failed_settles_move_the_stored_figures(ticket: Ticket) -> None:
    """The figures the totals are read from follow a reversal and a failed intent, as the whole state's do."""
    supervisor = Actor(kind="supervisor", user=None)
    chat(ticket, 2)
    record_action(ticket=ticket, tool="issue_refund", item="table", amount_cents=4000, idempotency_key="a")
    record_action(
        ticket=ticket, tool="send_certificate", item="lamp", amount_cents=1500, idempotency_key="b",
        status="intended",
    )  # fmt: skip
    settle_action(ticket=ticket, action_id="A2", status="failed", reason="card declined")
    pinned = whole_state(ticket)
    correct_state(
        ticket=ticket, by=supervisor, reason="bank bounced it", expected_version=pinned.version,
        op="action_reversed", target_id="A1",
    )  # fmt: skip
    pinned = whole_state(ticket)
    assert pinned.action_figures == {}  # nothing holds: A1 reversed, A2 failed
    assert (
        ActionFigures(pinned.action_figures).by_tool == ActionFigures.of(pinned.items.actions_taken).by_tool
    )
    assert pinned.agent_json()["refunded_cents_total"] == 0
    # Freed by both: the same refund again is allowed, and a second one after it is refused.
    record_action(ticket=ticket, tool="issue_refund", item="table", amount_cents=4000, idempotency_key="c")
    with pytest.raises(RepeatRefused):
        record_action(
            ticket=ticket, tool="Issue\u2011Refund", item="Table", amount_cents=4000, idempotency_key="d"
        )


def test_an_action_write_reads_the_actions_it_can_touch_not_the_state(ticket: Ticket) -> None:
    """At 300 actions on other items, recording one reads the earlier actions on its item, those on no item and
    the open intents: not the 300."""
    chat(ticket, 2)
    for n in range(300):
        record_action(
            ticket=ticket, tool="issue_refund", item=f"item-{n}", amount_cents=100, idempotency_key=f"k{n}"
        )
    record_action(
        ticket=ticket,
        tool="escalate_to_human",
        item="",
        amount_cents=0,
        idempotency_key="whole",
        status="intended",
    )
    pinned = whole_state(ticket)
    rows = touched_actions(pinned, keys=None)
    assert len(rows) == 301
    touched = touched_actions(pinned, keys=action_keys("item-7", None))
    assert [number for _, number, _ in touched] == [
        8,
        301,
    ]  # its item's refund, and the open whole-order intent
    with CaptureQueriesContext(connection) as queries, pytest.raises(RepeatRefused) as refused:
        record_action(
            ticket=ticket, tool="refund_order", item="ITEM-7", amount_cents=100, idempotency_key="x"
        )
    assert refused.value.detail["earlier_action"]["id"] == "A8"
    reads = [q["sql"] for q in queries.captured_queries if "FROM tickets_stateaction a" in q["sql"]]
    assert len(reads) == 1 and "k.key IN" in reads[0]  # by its item's keys, not every action


def test_action_rows_keep_what_the_state_serves(ticket: Ticket) -> None:
    """Each row's texts are its stored action's served texts, rewritten when the action is settled."""
    chat(ticket, 2)
    record_action(
        ticket=ticket,
        tool="issue_refund",
        item="table",
        amount_cents=4000,
        idempotency_key="a",
        status="intended",
    )
    settle_action(ticket=ticket, action_id="A1", status="succeeded", external_ref="re_123")
    [row] = StateAction.objects.filter(state__ticket=ticket)
    # jsonb keeps its own key order: the texts are the validated action's, in the model's order.
    assert (row.served, row.served_model) == action_texts(
        ActionItem.model_validate(row.data).model_dump(mode="json")
    )
    assert row.data["status"] == "succeeded" and row.data["external_ref"] == "re_123" and not row.open_intent
    assert StateActionKey.objects.filter(state=row.state, number=1).count() == 1
    assert whole_state(ticket).agent_json()["actions_taken"][0]["external_ref"] == "re_123"


@pytest.mark.parametrize(
    ("action_id", "number"),
    [
        ("A1", 1),
        ("A12", 12),
        ("A01", None),
        ("a1", None),
        ("A", None),
        ("A\u0661", None),
        ("A1" + "0" * 12, None),
        ("C1", None),
        ("", None),
    ],
)
def test_action_numbers_are_read_only_from_ids_the_desk_writes(action_id: str, number: int | None) -> None:
    assert action_number(action_id) == number


def test_a_refused_repeat_is_kept_without_writing_a_row(ticket: Ticket) -> None:
    chat(ticket, 2)
    record_action(ticket=ticket, tool="issue_refund", item="table", amount_cents=4000, idempotency_key="a")
    with pytest.raises(DeskError):
        record_action(
            ticket=ticket, tool="refund_order", item="table", amount_cents=4000, idempotency_key="b"
        )
    assert StateAction.objects.filter(state__ticket=ticket).count() == 1
    assert whole_state(ticket).action_count == 1


def test_the_plain_statement_names_the_models_tables() -> None:
    assert (StateAction._meta.db_table, StateActionKey._meta.db_table) == (ACTIONS_TABLE, KEYS_TABLE)
