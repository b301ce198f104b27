from __future__ import annotations

from typing import Any

from compaction.coverage import action_covered, check_coverage, text_covered

STATE: dict[str, Any] = {
    "actions_taken": [
        {"id": "A1", "tool": "issue_refund", "item": "garden-table", "amount_cents": 4000, "at_turn": 6}
    ],
    "customer_constraints": [{"id": "C1", "text": "no replacement wanted", "at_turn": 3}],
    "open_questions": [
        {"id": "Q1", "text": "photo of the second item (parasol) still outstanding", "at_turn": 20}
    ],
}


def test_the_seed_lossy_summary_misses_the_refund(scenario: dict[str, Any]) -> None:
    report = check_coverage(STATE, scenario["lossy_summary_turns_1_14"])
    missing = {(m["category"], m["id"]) for m in report.missing}
    assert ("actions_taken", "A1") in missing
    assert "4000 cents garden-table" in next(m["label"] for m in report.missing if m["id"] == "A1")


def test_an_action_needs_its_verb_item_and_amount() -> None:
    action = STATE["actions_taken"][0]
    assert action_covered(action, ["Refunded $40 for the garden table (turn 6)."])
    assert action_covered(action, ["issue_refund of 4000 cents for garden-table"])
    assert not action_covered(action, ["Refunded $25 for the garden table."])
    assert not action_covered(action, ["Refunded $40 for the parasol."])
    assert not action_covered(action, ["The buyer reported damage to the garden table costing $40."])


def test_constraints_and_questions_match_on_most_content_words() -> None:
    assert text_covered("no replacement wanted", ["Customer does not want a replacement"])
    assert not text_covered("photo of the second item (parasol) still outstanding", ["tracking checked"])


def test_a_complete_summary_covers_everything() -> None:
    summary = {
        "actions_taken": ["issue_refund 4000 cents garden-table at turn 6"],
        "customer_constraints": ["no replacement wanted"],
        "open_questions": ["photo of the parasol still outstanding"],
        "decisions": [],
    }
    report = check_coverage(STATE, summary)
    assert report.missing == [] and len(report.covered) == 3


def test_a_constraint_is_not_covered_by_a_summary_saying_the_opposite() -> None:
    assert not text_covered("no replacement wanted", ["the customer wants a replacement"])
    assert text_covered("no replacement wanted", ["declined a replacement"])
    assert text_covered("no replacement wanted", ["Customer doesn't want a replacement"])
    assert not text_covered("only contact by email", ["do not contact by email"])


def test_a_decision_left_out_of_the_summary_is_missing() -> None:
    state = {
        **STATE,
        "decisions": [{"id": "D1", "text": "keep the table with a partial refund", "at_turn": 5}],
    }
    summary = {
        "actions_taken": ["issue_refund 4000 cents garden-table at turn 6"],
        "customer_constraints": ["no replacement wanted"],
        "open_questions": ["photo of the parasol still outstanding"],
        "decisions": [],
    }
    report = check_coverage(state, summary)
    assert [(m["category"], m["id"]) for m in report.missing] == [("decisions", "D1")]
    summary["decisions"] = ["Customer keeps the table; partial refund agreed"]
    assert check_coverage(state, summary).missing == []
