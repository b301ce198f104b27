"""False coverage misses: a summary of id references only has none on any transcript shape the eval reads, and
the per-file false-miss figures count what the judgement rule says."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from compaction.summarizers import pinned_references
from core.coverage import check_coverage
from desk.importer import ImportClass, import_ticket_rolled_back
from evals.false_misses import false_miss_figures, judge_miss, render_false_misses
from evals.sources import expand, load
from tickets.models import PinnedState, Ticket, TicketClass

REPO = Path(__file__).resolve().parents[2]
# Every input `make eval` reads: the eval set, the public tau2 retail file and each published tau domain.
EVAL_INPUTS = [
    REPO / "demo" / "evalset",
    REPO / "demo" / "realdata" / "tau2-retail-gpt-4.1.json",
    REPO / "evals" / "fixtures" / "tau",
]

AIRLINE = {
    "actions_taken": [],
    "customer_constraints": [
        {"id": "C1", "text": "You do not want to fly before 11am est.", "at_turn": 1},
        {"id": "C2", "text": "You want to fly on May 20", "at_turn": 1},
    ],
    "open_questions": [],
    "decisions": [],
}


class _RollBack(Exception):
    pass


def _final_states(path: Path, tickets: int) -> list[dict[str, Any]]:
    """The pinned state each of the file's first tickets ends with, imported and rolled back."""
    _kind, docs = load(path)
    states = []
    for doc in docs[:tickets]:
        try:
            with transaction.atomic():
                spec = doc.ticket_class
                fields: dict[str, Any] = (
                    {"token_budget": spec.token_budget} if isinstance(spec, ImportClass) else {}
                )
                if isinstance(spec, ImportClass) and spec.money_tools is not None:
                    fields["money_tools"] = spec.money_tools
                if isinstance(spec, ImportClass) and spec.irreversible_tools is not None:
                    fields["irreversible_tools"] = spec.irreversible_tools
                cls = TicketClass.objects.create(slug=f"t-{uuid.uuid4().hex[:10]}", **fields)
                ticket_id = f"fm~{doc.ticket_id}"[:64]
                import_ticket_rolled_back(
                    doc.model_copy(update={"ticket_id": ticket_id, "ticket_class": cls.slug})
                )
                states.append(
                    PinnedState.objects.get(ticket=Ticket.objects.get(ticket_id=ticket_id)).agent_json()
                )
                raise _RollBack
        except _RollBack:
            pass
    return states


def test_the_issues_airline_case_has_no_miss_and_no_false_miss() -> None:
    summary = {"customer_constraints": ["C1", "C2"], "narrative": "Rebooking."}
    report = check_coverage(AIRLINE, summary)
    assert report.missing == []
    event = {"coverage": report.as_json(), "summary": summary, "pinned_state": AIRLINE}
    assert false_miss_figures([event])["false_misses"] == 0


@pytest.mark.django_db
@pytest.mark.parametrize("path", expand(EVAL_INPUTS), ids=lambda p: p.name)
def test_a_summary_of_id_references_only_has_no_miss_on_every_transcript_shape(path: Path) -> None:
    """Each file the eval reads, its tickets' real pinned states (money, dates, times, order ids, U+2011
    hyphens as the transcripts have them) against a summary made only of ids, in three shapes."""
    states = [s for s in _final_states(path, tickets=3) if any(s.get(k) for k in pinned_references(s))]
    assert states, f"{path.name}: no ticket pinned anything"
    for state in states:
        refs = pinned_references(state)
        shapes = [
            refs,  # ["C1", "C2"]
            {k: [", ".join(v)] if v else [] for k, v in refs.items()},  # ["C1, C2"]
            {k: [f"[{i}]" for i in v] for k, v in refs.items()},  # ["[C1]"]
        ]
        for summary in shapes:
            report = check_coverage(state, {**summary, "narrative": ""})
            assert report.missing == [], (path.name, summary, report.missing)


def _miss(item_id: str, category: str = "customer_constraints") -> dict[str, Any]:
    return {"id": item_id, "category": category, "label": "", "why": "no entry carries its content"}


@pytest.mark.parametrize(
    ("category", "entry", "false"),
    [
        ("customer_constraints", "C1", True),
        ("customer_constraints", "C1, C2", True),
        ("decisions", "[C1]", True),  # referenced by its id, whatever the field
        ("customer_constraints", "C10", False),
        ("customer_constraints", "C1 withdrawn", False),
        ("customer_constraints", "You do not want to fly before 11am EST!", True),  # word for word
        ("customer_constraints", "not: you do not want to fly before 11am est", False),
        ("customer_constraints", "no flights before 11am", False),  # a paraphrase: the labelled pairs' job
    ],
)
def test_the_judgement_rule(category: str, entry: str, false: bool) -> None:
    assert bool(judge_miss(_miss("C1"), AIRLINE, {category: [entry]})) is false


def test_an_action_is_stated_when_tool_item_and_amount_are_there_literally() -> None:
    state = {
        "actions_taken": [{"id": "A1", "tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}]
    }
    miss = _miss("A1", "actions_taken")
    assert judge_miss(miss, state, {"actions_taken": ["issue_refund garden-table $40.00"]})
    assert judge_miss(
        miss,
        state,
        {"actions_taken": ['{"tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}']},
    )
    assert not judge_miss(miss, state, {"actions_taken": ["issue_refund garden-table $25.00"]})
    assert not judge_miss(miss, state, {"actions_taken": ["issue_refund garden-table $40 not issued"]})
    assert not judge_miss(miss, state, {"actions_taken": ["refunded the table"]})


def test_the_figures_per_compaction_and_per_miss() -> None:
    def event(missing: list[str], entries: list[str]) -> dict[str, Any]:
        return {
            "coverage": {"covered": [], "missing": [_miss(i) for i in missing]},
            "summary": {"customer_constraints": entries},
            "pinned_state": AIRLINE,
        }

    events = [
        event(["C1", "C2"], ["C1"]),
        event(["C2"], ["C1"]),
        event([], ["C1", "C2"]),
        event(["C1"], ["C1"]),
    ]
    figures = false_miss_figures(events)
    assert (figures["replacing_compactions"], figures["with_miss"], figures["with_false_miss"]) == (4, 3, 2)
    assert (figures["misses"], figures["false_misses"]) == (4, 2)
    assert (figures["false_miss_rate"], figures["false_share_of_misses"]) == (0.5, 0.5)
    assert [e["id"] for e in figures["examples"]] == ["C1", "C1"]
    assert false_miss_figures([])["false_miss_rate"] == 0.0

    lines = render_false_misses({"f.json": {"false_misses": figures, "compactions": {"applied": 4}}})
    assert "2 with a false miss (false-miss rate 50%" in lines[1]
    empty = render_false_misses(
        {"g.json": {"false_misses": false_miss_figures([]), "compactions": {"applied": 2}}}
    )
    assert "not recorded" in empty[1]
