"""What a compaction dropped, on transcripts nobody here wrote for the test: the seed ticket T-40118 with
its scripted lossy summary, and a tau2-bench retail conversation (demo/realdata)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.passages import Passage, dropped_passages, facts_of, guess_kind, split_passages

DEMO = Path(__file__).resolve().parents[2] / "demo"


@pytest.fixture(scope="module")
def seed() -> dict[str, Any]:
    return json.loads((DEMO / "T-40118.json").read_text())


@pytest.fixture(scope="module")
def tau_task_5() -> dict[str, Any]:
    data = json.loads((DEMO / "realdata" / "tau2-retail-gpt-4.1.json").read_text())
    return next(s for s in data["simulations"] if s["task_id"] == "5")


def seed_turns(seed: dict[str, Any], through: int = 21) -> list[dict[str, Any]]:
    return [
        {"turn": n, "role": t["role"], "content": t.get("content", "")}
        for n, t in enumerate(seed["turns"][:through], start=1)
    ]


def lossy(seed: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in seed["lossy_summary_turns_1_14"].items() if k != "why"}


REFUND = {"id": "A1", "at_turn": 6, "tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}


def passage(result: list[Any], turn: int, starts: str) -> Passage:
    for tp in result:
        for p in tp.passages:
            if p.turn == turn and p.text.startswith(starts):
                return p
    raise AssertionError(f"no passage of turn {turn} starts with {starts!r}")


def test_the_40_dollar_refund_is_dropped_by_the_lossy_summary_when_nothing_pins_it(seed: dict) -> None:
    state = {"ticket": "T-40118", "order": "SU-87310", "actions_taken": []}
    result = dropped_passages(seed_turns(seed), lossy(seed), [state])
    offer = passage(result, 4, "Since you're keeping the table, I can refund $40")
    done = passage(result, 8, "a $40 refund for the garden table")
    for p in (offer, done):
        assert p.dropped and p.kind == "action_added" and p.amount_cents == 4000 and p.tool == "issue_refund"
    # Its span is its place in the turn's text.
    text = seed["turns"][7]["content"]
    assert text[done.start : done.end] == done.text
    # What the summary did keep is not flagged: the declined replacement and the inspection.
    assert not passage(result, 3, "I don't want a replacement").dropped
    assert passage(result, 3, "I don't want a replacement").kept_by == "summary.customer_constraints[0]"
    assert not passage(result, 12, "It has been held for inspection").dropped


def test_the_refund_is_not_dropped_when_the_pinned_state_has_the_action(seed: dict) -> None:
    state = {"ticket": "T-40118", "order": "SU-87310", "actions_taken": [REFUND]}
    result = dropped_passages(seed_turns(seed), lossy(seed), [state])
    for turn, starts in ((4, "Since you're keeping"), (5, "Yes, $40 is fair"), (8, "a $40 refund")):
        p = passage(result, turn, starts)
        assert not p.dropped and p.kept_by == "A1", p
    # The delay the agent promised is in neither: still dropped, on its own.
    delay = passage(result, 8, "and should show within 3-5 business days")
    assert delay.dropped and delay.kind == "decision_made"


def test_a_different_amount_is_not_the_same_fact(seed: dict) -> None:
    state = {"actions_taken": [{**REFUND, "amount_cents": 2500}]}
    result = dropped_passages(seed_turns(seed), lossy(seed), [state])
    assert passage(result, 8, "a $40 refund").dropped


def test_small_talk_is_never_flagged(seed: dict) -> None:
    turns = [
        {"turn": 1, "role": "customer", "content": "Thanks!"},
        {"turn": 2, "role": "agent", "content": "Let me check."},
        {"turn": 3, "role": "customer", "content": "Yes. Please do. OK."},
        {"turn": 4, "role": "agent", "content": "Hi! It is about SU-87310."},
    ]
    result = dropped_passages(turns, {}, [{"order": "SU-87310"}])
    talk = [p.small_talk for tp in result for p in tp.passages]
    assert len(talk) == 7 and all(talk)
    assert not any(tp.dropped for tp in result)


def test_empty_turns_and_tool_turns_give_no_passages(seed: dict) -> None:
    turns = [
        {"turn": 1, "role": "customer", "content": ""},
        {"turn": 2, "role": "agent", "content": "   \n  "},
        {"turn": 3, "role": "agent"},
        {"turn": 4, "role": "tool_result", "content": '{"status": "succeeded", "amount_cents": 4000}'},
        {"turn": 5, "role": "system", "content": "Pinned ticket state"},
    ]
    result = dropped_passages(turns, None, [])
    assert [(tp.turn, tp.passages) for tp in result] == [(1, []), (2, []), (3, [])]
    assert split_passages("") == []


def test_a_u2011_hyphen_and_a_plural_still_match_the_pinned_item() -> None:
    state = {"actions_taken": [REFUND]}
    turns = [{"turn": 9, "role": "agent", "content": "I refunded $40.00 for the garden\u2011tables."}]
    (tp,) = dropped_passages(turns, {}, [state])
    assert not tp.passages[0].dropped and tp.passages[0].kept_by == "A1"
    # Against a constraint written with a plain hyphen and in the singular.
    constraint = {"customer_constraints": [{"id": "C2", "text": "no re-delivery of the garden-table"}]}
    turns = [
        {"turn": 3, "role": "customer", "content": "No re\u2011deliveries of the garden tables, please."}
    ]
    (tp,) = dropped_passages(turns, {}, [constraint])
    assert tp.passages[0].kept_by == "C2"
    assert facts_of("the garden\u2011tables").stems == facts_of("the garden-table").stems


def test_a_real_tau2_conversation_flags_the_preference_the_summary_left_out(tau_task_5: dict) -> None:
    turns = [
        {"turn": n, "role": m["role"], "content": m.get("content") or ""}
        for n, m in enumerate(tau_task_5["messages"], start=1)
    ]
    summary = {
        "actions_taken": ["return of the water bottle from order #W6390527 submitted, refund to PayPal"],
        "customer_constraints": [],
        "open_questions": [],
        "decisions": [],
        "narrative": "Mei Kovacs asked to exchange a water bottle and a desk lamp, then returned the bottle.",
    }
    state = {"order": "#W6390527", "actions_taken": [{"id": "A1", "tool": "return_delivered_order_items"}]}
    result = dropped_passages(turns, summary, [state])
    prefer = passage(result, 18, "and if possible, I\u2019d prefer it to be battery-powered")
    assert prefer.dropped
    assert passage(result, 27, "Your return request for the water bottle").dropped is False
    # Pinned as a constraint, the same passage survives.
    pinned = {
        **state,
        "customer_constraints": [{"id": "C1", "text": "prefers a battery-powered lamp, not USB or AC"}],
    }
    again = dropped_passages(turns, summary, [pinned])
    assert passage(again, 18, "and if possible, I\u2019d prefer").kept_by == "C1"
    # The courtesy turns at the end are not facts.
    assert passage(result, 28, "Thanks for your help").small_talk


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("I can refund $40 for the scratched leg.", "action_added"),
        ("We credited the card back.", "action_added"),
        ("Could you send a photo of both boxes?", "question_opened"),
        ("I don\u2019t want a replacement.", "constraint_stated"),
        ("Deliveries only after 5pm.", "constraint_stated"),
        ("The seller re-ships for free if a box is lost.", "decision_made"),
    ],
)
def test_the_kind_is_guessed_from_the_passage(text: str, kind: str) -> None:
    assert guess_kind(text, facts_of(text)) == kind


def test_pieces_rebuild_the_turn_text(seed: dict) -> None:
    result = dropped_passages(seed_turns(seed), lossy(seed), [{}])
    for tp in result:
        assert "".join(text for text, _ in tp.pieces()) == tp.text
        assert [p for _, p in tp.pieces() if p] == tp.dropped
