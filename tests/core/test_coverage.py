from __future__ import annotations

import json
from typing import Any

import pytest

from core.coverage import (
    action_covered,
    action_match,
    check_coverage,
    id_references,
    normalize_name,
    text_covered,
    text_match,
)

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


# --- the failure modes of issue 13: each one the old word-share check got wrong ---

REFUND = STATE["actions_taken"][0]


def test_a_refund_the_summary_says_was_not_issued_is_missing() -> None:
    assert not action_covered(REFUND, ["The refund of $40 for the garden table was NOT issued."])
    assert not action_covered(REFUND, ["Garden table: $40 refund never went through."])
    assert not action_covered(REFUND, ["Cancellation of the garden table refund ($40) failed."])
    # A negation elsewhere in the entry, about something else, does not undo it.
    assert action_covered(REFUND, ["Refunded $40 for the garden table, no return needed."])


def test_a_refund_proposed_promised_or_requested_is_not_a_refund_taken() -> None:
    for entry in (
        "A refund of $40 was proposed for the garden table.",
        "Promised the buyer $40 back on the garden table.",
        "Will refund $40 for the garden table once the photo arrives.",
        "Customer asked for a $40 refund for the garden table.",
        "Refund for garden table: $40 - pending approval",
    ):
        assert not action_covered(REFUND, [entry]), entry
    assert action_covered(REFUND, ["Refund of $40 approved and processed for the garden table."])


def test_refunded_40_dollars_for_the_table_covers_issue_refund_4000_cents_garden_table() -> None:
    """The old check missed it: "the table" names the item when the verb and the amount match."""
    assert action_covered(REFUND, ["refunded $40 for the table"])
    assert not action_covered(REFUND, ["refunded $40"])  # no item at all


@pytest.mark.parametrize(
    "entry",
    [
        "Refunded 40 dollars for the garden table.",
        "Refund of USD 40.00 issued for the garden-table.",
        "Refunded 40.00 EUR on the garden table",
        "garden table refunded: 4000 cents",
        "Refunded forty dollars for the garden table.",
        "Refunded €40 for the garden table",
        "issue_refund 4000 garden-table",
    ],
)
def test_money_is_compared_in_cents_whatever_the_unit(entry: str) -> None:
    assert action_covered(REFUND, [entry])


@pytest.mark.parametrize(
    "entry",
    [
        "Refunded $25 for the garden table.",
        "Refunded $400 for the garden table.",
        "garden table: 400 cents refunded",
    ],
)
def test_a_wrong_amount_is_a_miss_and_says_so(entry: str) -> None:
    match = action_match(REFUND, [entry])
    assert not match.covered and "wrong amount" in match.why


def test_tools_are_matched_through_their_verb_family() -> None:
    cancel = {"id": "A1", "tool": "cancel_pending_order", "item": "#W4923227", "amount_cents": 15432}
    assert action_covered(cancel, ["Cancelled pending order #W4923227; $154.32 back to the gift card."])
    assert not action_covered(cancel, ["Looked up order #W4923227 ($154.32, pending)."])
    ret = {"id": "A3", "tool": "book_return", "item": "electric-kettle"}
    assert action_covered(ret, ["Return booked for the electric kettle."])
    assert not action_covered(ret, ["Exchanged the electric kettle."])
    address = {"id": "A3", "tool": "modify_pending_order_address", "item": "#W1234567"}
    assert action_covered(address, ["Updated the shipping address on #W1234567."])
    assert not action_covered(address, ["Updated the payment method on #W1234567."])


def test_no_refund_wanted_replacement_ok_does_not_cover_no_replacement_wanted() -> None:
    assert not text_covered("no replacement wanted", ["no refund wanted, replacement ok"])
    assert text_covered("no replacement wanted", ["wants a refund instead of a replacement"])


def test_an_open_question_the_summary_calls_answered_is_missing() -> None:
    question = "photo of the second item (parasol) still outstanding"
    match = text_match(question, ["Parasol photo received."], kind="open_questions")
    assert not match.covered and "answered" in match.why
    assert not text_covered(question, ["Customer sent the photo of the parasol."], kind="open_questions")
    assert text_covered(question, ["Parasol photo not received yet."], kind="open_questions")
    assert text_covered(question, ["Still waiting on the parasol photo."], kind="open_questions")


def test_refund_denied_does_not_cover_an_approved_refund_decision() -> None:
    decision = "approved a refund of $40 for the garden table"
    assert not text_covered(decision, ["Refund denied."], kind="decisions")
    assert not text_covered(decision, ["Refund for the garden table proposed."], kind="decisions")
    assert not text_covered(decision, ["Approved a $25 refund for the garden table."], kind="decisions")
    assert text_covered(decision, ["$40 refund for the garden table granted."], kind="decisions")


def test_an_entry_naming_a_pinned_item_by_its_id_covers_it_unless_it_contradicts_it() -> None:
    assert action_covered(REFUND, ["A1 done."])
    assert not action_covered(REFUND, ["A1 not issued."])
    assert not action_covered(REFUND, ["A1 refund: $25."])
    assert not action_covered(REFUND, ["A10 refunded."])  # a whole word, not a prefix
    assert text_covered("no replacement wanted", ["C1 still applies."], item_id="C1")
    assert not text_covered("no replacement wanted", ["C2 still applies."], item_id="C1")
    assert not text_covered(
        STATE["open_questions"][0]["text"], ["Q1 answered."], kind="open_questions", item_id="Q1"
    )
    report = check_coverage(
        {"decisions": [{"id": "D3", "text": "waive the return shipping fee"}]}, {"decisions": ["D3 holds."]}
    )
    assert [c["id"] for c in report.covered] == ["D3"]


def test_a_pinned_action_as_json_covers_itself_field_by_field() -> None:
    """The pinned-state message of a context carries each action as JSON (with "reversed": false)."""
    as_json = '{"id":"A1","tool":"issue_refund","item":"garden-table","amount_cents":4000,"reversed":false}'
    assert action_covered(REFUND, [as_json])
    assert not action_covered(REFUND, [as_json.replace("4000", "2500")])
    assert not action_covered(REFUND, [as_json.replace("false", "true")])


def test_names_are_normalized_for_width_case_zero_width_and_separators() -> None:
    assert normalize_name("Garden\u200b_Table") == normalize_name("garden-table") == "garden table"
    assert normalize_name("\uff33\uff35\uff0d90702") == normalize_name("su 90702")


def test_missing_items_say_why_in_the_report() -> None:
    report = check_coverage(STATE, {"actions_taken": ["Refunded $25 for the garden table."]})
    why = {m["id"]: m["why"] for m in report.missing}
    assert "wrong amount" in why["A1"] and "empty" in why["C1"]


def test_an_entry_that_carries_the_item_word_for_word_covers_it_however_light_its_words() -> None:
    """Found by the eval on the public tau2 file: a constraint made of light words only matched nothing."""
    assert text_covered("If so, do it.", ["If so, do it."])
    assert text_covered("If so, do it.", ["  if so,  DO it. "])
    assert not text_covered("If so, do it.", ["If not, leave it."])


# --- id references (issue 21): resolved before any number or text matching ------------------------


@pytest.mark.parametrize(
    ("entry", "ids"),
    [
        ("C1", {"C1"}),
        ("A1, A2", {"A1", "A2"}),
        ("Q1 and D3.", {"Q1", "D3"}),
        ("C1: no flights before 11am", {"C1"}),
        ("(A2) parcel held", {"A2"}),
        ("No flights before 11am", None),
        ("Refunded $40 for A1", None),
    ],
)
def test_an_entry_is_an_id_reference_only_when_made_of_ids_or_opening_with_one(
    entry: str, ids: set[str] | None
) -> None:
    assert id_references(entry) == (None if ids is None else frozenset(ids))


def test_an_id_entry_covers_its_item_and_nothing_else() -> None:
    state = {
        "customer_constraints": [
            {"id": "C1", "text": "You do not want to fly before 11am est.", "at_turn": 1},
            {"id": "C2", "text": "no flights before 11am on weekends", "at_turn": 2},
        ]
    }
    report = check_coverage(state, {"customer_constraints": ["C1: no flights before 11am"]})
    assert [c["id"] for c in report.covered] == ["C1"]
    assert [m["id"] for m in report.missing] == ["C2"]


def test_the_report_names_the_summary_entry_that_covered_each_item() -> None:
    state = {
        "actions_taken": [{"id": "A1", "tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}],
        "decisions": [{"id": "D1", "text": "approved a refund of $40 for the garden table"}],
    }
    summary = {
        "actions_taken": ["Parcel tracked.", "Refunded $40 for the garden table."],
        "decisions": ["D1"],
    }
    covered = {c["id"]: c["by"] for c in check_coverage(state, summary).covered}
    assert covered == {
        "A1": {"field": "actions_taken", "index": 1, "text": "Refunded $40 for the garden table."},
        "D1": {"field": "decisions", "index": 0, "text": "D1"},
    }


def test_a_pinned_action_in_the_summary_is_matched_by_the_guards_item_key() -> None:
    """The coverage check and the repeat guard agree on what one item is (core.identity.normalize_item)."""
    action = {"tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}
    for item in ["the garden tables", "table (garden)", "garden\u2011table (SU-87310)"]:
        assert action_covered(action, [json.dumps({**action, "item": item})])
    assert not action_covered(action, [json.dumps({**action, "item": "scratched leg"})])


def test_a_pure_id_reference_covers_its_item_in_whatever_field_it_is_filed() -> None:
    """SmolLM2 writes `"actions_taken": ["A1", "C2"]`: `C2` names the constraint and nothing else."""
    state = {
        "actions_taken": [{"id": "A1", "tool": "send_payment_request", "item": "B1002"}],
        "customer_constraints": [
            {"id": "C1", "text": "You do not want to fly before 11am est."},
            {"id": "C2", "text": "You want your line back without changing your plan."},
        ],
    }
    report = check_coverage(state, {"actions_taken": ["A1", "C2"], "customer_constraints": []})
    by = {c["id"]: c["by"] for c in report.covered}
    assert by["C2"] == {"field": "actions_taken", "index": 1, "text": "C2"}
    assert [m["id"] for m in report.missing] == ["C1"]
    # Only a pure reference travels: an entry that says something about the id stays in its own field.
    report = check_coverage(state, {"actions_taken": ["A1", "C1: flights before 11am are fine"]})
    assert {m["id"] for m in report.missing} == {"C1", "C2"}
    # `C20` is not `C2`.
    assert "C2" in {m["id"] for m in check_coverage(state, {"decisions": ["C20"]}).missing}
