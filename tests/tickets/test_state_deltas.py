"""The pinned state grows by deltas: a change costs the tokens of what it changed, the audit keeps the change
(not two copies of the state), and the state as of any version is the audit replayed."""

from __future__ import annotations

import importlib
import json
import re
from typing import Any

import pytest

from compaction.selectors import state_as_of_turn
from core.state import StateItems, agent_state, model_state, replay_changes
from core.tokens import count_message, state_message, state_tokens
from tests.factories import chat
from tickets.accounts import create_person
from tickets.models import PinnedState, StateChange, Ticket
from tickets.services.actions import record_action, settle_action
from tickets.services.actors import Actor
from tickets.services.state_changes import change_state, correct_state

pytestmark = pytest.mark.django_db


def state_of(ticket: Ticket) -> PinnedState:
    return PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)


def every_kind_of_change(ticket: Ticket) -> list[dict[str, Any]]:
    """One of each state operation, agents' and a supervisor's; the agent-facing state after each."""
    supervisor = Actor(
        kind="supervisor", user=create_person(username="sue", password="pw-123456", role="supervisor")
    )
    chat(ticket, 4)
    seen = [state_of(ticket).agent_json()]

    def step(call: Any) -> None:
        call()
        seen.append(state_of(ticket).agent_json())

    step(
        lambda: record_action(
            ticket=ticket, tool="issue_refund", item="garden-table", amount_cents=4000, idempotency_key="k1"
        )
    )
    step(
        lambda: record_action(
            ticket=ticket,
            tool="Send-Certificate",
            item="voucher",
            amount_cents=1500,
            idempotency_key="k2",
            status="intended",
        )
    )
    step(lambda: settle_action(ticket=ticket, action_id="A2", status="succeeded"))
    step(lambda: change_state(ticket=ticket, op="constraint_stated", text="Email only, no phone calls"))
    step(lambda: change_state(ticket=ticket, op="question_opened", text="Did the courier scan the parcel?"))
    step(lambda: change_state(ticket=ticket, op="decision_made", text="No replacement: the buyer declined"))
    version = state_of(ticket).version
    step(
        lambda: correct_state(
            ticket=ticket,
            by=supervisor,
            reason="refund bounced",
            expected_version=version,
            op="action_reversed",
            target_id="A1",
        )
    )
    version = state_of(ticket).version
    step(
        lambda: correct_state(
            ticket=ticket,
            by=supervisor,
            reason="wording",
            expected_version=version,
            op="constraint_edited",
            target_id="C1",
            text="Email only",
        )
    )
    step(lambda: change_state(ticket=ticket, op="question_resolved", text="Q1"))
    step(
        lambda: record_action(
            ticket=ticket, tool="issue_refund", item="Garden_Table", amount_cents=4000, idempotency_key="k3"
        )
    )
    return seen


def test_the_kept_token_count_is_the_count_by_parts_after_every_kind_of_change(ticket: Ticket) -> None:
    """The count moved by each change's delta equals a recount of the whole state by the same rule."""
    every_kind_of_change(ticket)
    pinned = state_of(ticket)
    assert pinned.tokens == state_tokens(pinned.agent_json())
    ticket.refresh_from_db()
    assert (
        ticket.context_tokens
        == ticket.system_prompt_tokens + pinned.tokens + sum(t.tokens for t in ticket.turns.all()) + 3
    )  # the reply priming


def test_counting_by_parts_never_undercounts_and_stays_close(ticket: Ticket) -> None:
    """A budget is never exceeded because of the rule: by parts is at least the exact count, at most a few
    tokens more per item."""
    every_kind_of_change(ticket)
    state = state_of(ticket).agent_json()
    exact = count_message(state_message(state))
    items = sum(
        len(state[name]) for name in ("actions_taken", "customer_constraints", "open_questions", "decisions")
    )
    assert exact <= state_tokens(state) <= exact + 3 * items


def test_the_audit_keeps_the_change_not_copies_of_the_state(ticket: Ticket) -> None:
    """The 40th action's audit row is as small as the first's: it holds the item, not the state."""
    chat(ticket, 2)
    for n in range(40):
        record_action(
            ticket=ticket, tool="track_parcel", item=f"parcel-{n}", reversible=True, idempotency_key=f"p{n}"
        )
    rows = list(StateChange.objects.filter(ticket=ticket, op="action_taken").order_by("to_version"))
    first, last = (len(json.dumps(r.change)) for r in (rows[0], rows[-1]))
    assert last <= first + 10  # the ids and the key grow a digit or two, nothing else
    [item] = rows[-1].item_changes
    assert item.before is None and item.after["item"] == "parcel-39"


def test_every_version_is_the_audit_replayed(ticket: Ticket) -> None:
    seen = every_kind_of_change(ticket)
    changes = list(StateChange.objects.filter(ticket=ticket).order_by("to_version"))
    tools = ticket.ticket_class.tool_catalog
    for state in seen:
        upto = [c for c in changes if c.to_version <= state["version"]]
        data = replay_changes(item for c in upto for item in c.item_changes)
        rebuilt = agent_state(
            ticket=ticket.ticket_id,
            order=ticket.order_id,
            seller_type=ticket.seller_type,
            version=state["version"],
            items=StateItems.load(data, tools=tools),
        )
        assert rebuilt == state
    # The replay a supervisor reads: the state right after the newest turn is the state now.
    replayed, tokens = state_as_of_turn(ticket, ticket.turn_count)
    assert replayed == model_state(seen[-1]) and tokens == state_of(ticket).tokens


def test_the_migration_turns_two_copies_into_the_change_between_them() -> None:
    delta = importlib.import_module("tickets.migrations.0011_state_change_deltas").delta
    before = {"actions_taken": [{"id": "A1", "status": "intended"}], "refunded_cents_total": 0}
    settled = {"actions_taken": [{"id": "A1", "status": "succeeded"}], "refunded_cents_total": 4000}
    assert delta(before, settled, "A1") == {
        "items": [
            {
                "category": "actions_taken",
                "before": before["actions_taken"][0],
                "after": settled["actions_taken"][0],
            }
        ],
        "totals": {"refunded_cents_total": [0, 4000]},
    }
    asked = {"open_questions": [{"id": "Q1", "text": "scanned?"}]}
    assert delta(asked, {"open_questions": []}, "Q1")["items"] == [
        {"category": "open_questions", "before": {"id": "Q1", "text": "scanned?"}, "after": None}
    ]
    assert delta({}, {"actions_taken": []}, "") == {}  # the opening row changed no item


def test_two_changes_through_one_locked_state_each_audit_their_own_item(ticket: Ticket) -> None:
    """The items a change keeps on the row carry its log; the next change through the same row audits only
    what it did."""
    from django.db import transaction

    from core.vocabulary import StateOp
    from tickets.services.actors import SYSTEM
    from tickets.services.state_changes import change_pinned_state, lock_pinned_state

    def stating(text: str) -> Any:
        return lambda items: items.state_constraint(text=text, at_turn=None)

    with transaction.atomic():
        pinned = lock_pinned_state(ticket)
        for text in ("email only", "no calls"):
            change_pinned_state(
                ticket=ticket,
                op=StateOp.CONSTRAINT_STATED,
                by=SYSTEM,
                mutate=stating(text),
                at_turn=None,
                locked=pinned,
            )
    rows = StateChange.objects.filter(ticket=ticket, op="constraint_stated").order_by("to_version")
    assert [[c.after["text"] for c in row.item_changes] for row in rows] == [["email only"], ["no calls"]]
    assert state_of(ticket).tokens == state_tokens(state_of(ticket).agent_json())


def test_the_database_edits_the_stored_items_to_what_the_audit_says(ticket: Ticket) -> None:
    """Each change sends the item it changed (appended, replaced, removed in the stored JSON); the stored
    document after every kind of change is the audit replayed, item for item."""
    every_kind_of_change(ticket)
    pinned = PinnedState.objects.get(ticket=ticket)
    stored = {**pinned.data, "actions_taken": [row.data for row in pinned.action_rows.all()]}
    changes = StateChange.objects.filter(ticket=ticket).order_by("to_version")
    assert stored == replay_changes(item for c in changes for item in c.item_changes)
    assert [a["id"] for a in stored["actions_taken"]] == ["A1", "A2", "A3"]
    assert stored["open_questions"] == [] and stored["questions_opened"] == 1
    assert stored["customer_constraints"][0]["text"] == "Email only"


def test_recording_an_action_sends_the_action_not_the_state(ticket: Ticket, settings: Any) -> None:
    """At 40 actions the state's UPDATE carries one action: its size does not grow with the state."""
    settings.DATABASE_PREPARED_STATEMENTS = False  # bound on the client: the values are in the logged SQL
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    chat(ticket, 2)

    def update_size(n: int) -> int:
        with CaptureQueriesContext(connection) as queries:
            record_action(
                ticket=ticket, tool="track_parcel", item=f"box-{n}", reversible=True, idempotency_key=f"b{n}"
            )
        # On PostgreSQL the UPDATE is one part of the write's one statement (tickets.write_batch), with the
        # audit row and the key's answer: each carries the one action too.
        [sql] = [q["sql"] for q in queries.captured_queries if 'UPDATE "tickets_pinnedstate"' in q["sql"]]
        update = re.split(r"\), w\d+ AS \(", sql[sql.index('UPDATE "tickets_pinnedstate"') :])[0]
        return len(update)

    first = update_size(0)
    for n in range(1, 40):
        record_action(
            ticket=ticket, tool="track_parcel", item=f"box-{n}", reversible=True, idempotency_key=f"b{n}"
        )
    assert update_size(40) <= first + 20
    # The state itself did grow: its 41 actions are rows of their own, each written once with its texts.
    pinned = state_of(ticket)
    assert pinned.action_count == 41
    assert sum(len(row.served) for row in pinned.action_rows.all()) > 5 * first
