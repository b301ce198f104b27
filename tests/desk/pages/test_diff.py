"""The state's history as a diff: pure lines from two versions, shown on the audit trail and in replay."""

from __future__ import annotations

import pytest
from django.test import Client

from desk.pages.diff import change_diff, state_diff
from tests.browser.desk_data import import_seed_t40118, supervisor

REFUND = {"id": "A1", "at_turn": 6, "tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}


def test_an_added_refund_reads_as_one_line_and_moves_the_total() -> None:
    lines = state_diff(
        {"actions_taken": [], "refunded_cents_total": 0},
        {"actions_taken": [REFUND], "refunded_cents_total": 4000},
    )
    assert [(d.kind, d.text) for d in lines] == [
        ("added", "A1 issue_refund $40.00 garden-table (turn 6)"),
        ("changed", "refunded total: $0.00 → $40.00"),
    ]


def test_a_reversal_shows_the_fields_that_moved_not_the_bookkeeping() -> None:
    before = {
        "actions_taken": [{**REFUND, "reversed": False, "idempotency_key": "k"}],
        "refunded_cents_total": 4000,
    }
    after = {
        "actions_taken": [
            {**REFUND, "reversed": True, "reversed_reason": "bank returned it", "idempotency_key": "k2"}
        ],
        "refunded_cents_total": 0,
    }
    texts = [d.text for d in state_diff(before, after)]
    assert texts == [
        "A1 reversed: no → yes",
        "A1 reversed_reason: — → bank returned it",
        "refunded total: $40.00 → $0.00",
    ]


def test_the_opening_change_lists_nothing_and_an_edit_names_old_and_new_text() -> None:
    assert state_diff({}, {"actions_taken": [], "refunded_cents_total": 0}) == []
    lines = state_diff(
        {"customer_constraints": [{"id": "C1", "text": "no replacement"}]},
        {"customer_constraints": [{"id": "C1", "text": "no replacement, email only"}]},
    )
    assert [d.text for d in lines] == ["C1 text: no replacement → no replacement, email only"]


@pytest.mark.django_db
def test_audit_rows_and_replay_show_the_diff(client: Client, scenario: dict) -> None:
    client.force_login(supervisor())
    import_seed_t40118(scenario)
    page = client.get("/tickets/T-40118/").content.decode()
    assert 'class="diff-added cat-actions_taken"' in page
    assert "A1 issue_refund $40.00 garden-table (turn 6)" in page
    replay = client.get("/tickets/T-40118/replay/", {"turn": 7}).content.decode()
    changes = replay[replay.index('id="replay-changes"') :]
    assert "refunded total: $0.00 → $40.00" in changes
    quiet = client.get("/tickets/T-40118/replay/", {"turn": 8}).content.decode()
    assert "The pinned state did not change at this turn." in quiet


def test_an_audited_change_reads_as_the_lines_of_its_items_and_the_total_it_moved() -> None:
    """The audit keeps one item before and after; the page shows it as the same lines a whole-state diff
    would give."""
    change = {
        "items": [
            {
                "category": "actions_taken",
                "before": {"id": "A1", "tool": "issue_refund", "item": "garden-table", "status": "intended"},
                "after": {"id": "A1", "tool": "issue_refund", "item": "garden-table", "status": "succeeded"},
            }
        ],
        "totals": {"refunded_cents_total": [0, 4000]},
    }
    texts = [(d.kind, d.text) for d in change_diff(change)]
    assert texts == [
        ("changed", "A1 status: intended → succeeded"),
        ("changed", "refunded total: $0.00 → $40.00"),
    ]
    resolved = {
        "items": [{"category": "open_questions", "before": {"id": "Q1", "text": "scanned?"}, "after": None}]
    }
    assert [d.kind for d in change_diff(resolved)] == ["removed"]
    assert change_diff({}) == []
