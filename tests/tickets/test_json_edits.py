"""The database's edits of the stored state: appends land at the end, also on a list the document lacks."""

from __future__ import annotations

from typing import Any

import pytest

from tickets.json_edits import EditJSON, JSONEdit
from tickets.models import PinnedState, Ticket
from tickets.services.actions import record_action
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db


def edited(ticket: Ticket, data: dict[str, Any], *edits: JSONEdit) -> Any:
    PinnedState.objects.filter(ticket=ticket).update(data=data)
    PinnedState.objects.filter(ticket=ticket).update(data=EditJSON("data", edits))
    return PinnedState.objects.get(ticket=ticket).data


def test_an_append_goes_after_the_last_item(ticket: Ticket) -> None:
    data = edited(
        ticket, {"decisions": [{"id": "D1"}], "v": 1}, JSONEdit("append", "decisions", value={"id": "D2"})
    )
    assert data == {"decisions": [{"id": "D1"}, {"id": "D2"}], "v": 1}


def test_an_append_to_an_empty_list_is_its_only_item(ticket: Ticket) -> None:
    assert edited(ticket, {"decisions": []}, JSONEdit("append", "decisions", value={"id": "D1"})) == {
        "decisions": [{"id": "D1"}]
    }


def test_an_item_for_a_list_the_stored_document_lacks_is_kept(ticket: Ticket) -> None:
    """The database would leave such a document as it was: the service writes the whole document instead."""
    PinnedState.objects.filter(ticket=ticket).update(data={"customer_constraints": [], "questions_opened": 0})
    change_state(ticket=ticket, op="decision_made", text="No replacement: the buyer declined")
    record_action(ticket=ticket, tool="issue_refund", item="table", amount_cents=4000, idempotency_key="k1")
    stored = PinnedState.objects.get(ticket=ticket)
    assert [d["text"] for d in stored.data["decisions"]] == ["No replacement: the buyer declined"]
    assert [row.data["item"] for row in stored.action_rows.all()] == ["table"]
    assert stored.items.refunded_cents_total == 4000


def test_chained_edits_apply_in_order(ticket: Ticket) -> None:
    data = edited(
        ticket,
        {"actions_taken": [{"id": "A1"}, {"id": "A2"}], "open_questions": [], "questions_opened": 0},
        JSONEdit("append", "actions_taken", value={"id": "A3", "text": 'it\'s 100% "quoted"'}),
        JSONEdit("replace", "actions_taken", index=0, value={"id": "A1", "reversed": True}),
        JSONEdit("append", "open_questions", value={"id": "Q1"}),
        JSONEdit("set", "questions_opened", value=1),
    )
    assert data == {
        "actions_taken": [
            {"id": "A1", "reversed": True},
            {"id": "A2"},
            {"id": "A3", "text": 'it\'s 100% "quoted"'},
        ],
        "open_questions": [{"id": "Q1"}],
        "questions_opened": 1,
    }
