"""The real-model coverage pairs: the fixture, its labels, the figures computed from them, and the collector.

The collector runs the desk's compaction path with the `openai` backend; here it meets the loopback fake server
(over real HTTP) so the plumbing is tested on every run, and, marked `model`, the real SmolLM2 server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.summary import Summary
from evals.coverage_bench import (
    MODEL_PAIRS,
    BenchFormatError,
    load_model_pairs,
    predicted_missing,
    run_model_pairs,
)
from evals.model_pairs import collect, numbered, pairs_of_event
from tests.fake_openai import Reply

E01 = Path(__file__).resolve().parents[2] / "demo" / "evalset" / "E01-constraint-in-passing.json"


def _rows() -> list[dict]:
    return [json.loads(line) for line in MODEL_PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_fixture_loads_with_150_labelled_pairs_each_with_a_reason() -> None:
    pairs, labellers = load_model_pairs()
    assert len(pairs) >= 150
    assert labellers  # who labelled, named
    assert all(p.reason.strip() for p in pairs)
    assert {p.expected_missing for p in pairs} == {True, False}  # neither figure is vacuous
    assert len({p.id for p in pairs}) == len(pairs)
    rows = _rows()
    # Each pair keeps what the model really wrote and how it was asked.
    assert all(r["raw_output"] and r["collection"]["model"] and r["collection"]["collected_at"] for r in rows)
    assert all(Summary.model_validate_json(r["raw_output"]) for r in rows)
    # Taken from real summaries of several inputs, not one ticket.
    assert len({r["source"]["file"] for r in rows}) >= 3


def test_the_figures_are_computed_from_the_labels(tmp_path: Path) -> None:
    """Flipping one label moves the figures: they come from the labels, not from the check."""
    rows = _rows()
    before = run_model_pairs()
    flipped = next(i for i, r in enumerate(rows) if r["expected"] == "missing")
    rows[flipped] = {**rows[flipped], "expected": "covered"}
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    after = run_model_pairs(path)
    assert after.figures.pairs == before.figures.pairs
    assert (after.figures.precision, after.figures.recall) != (
        before.figures.precision,
        before.figures.recall,
    )
    assert (
        after.figures.true_missing + after.figures.missed_missing
        == before.figures.true_missing + before.figures.missed_missing - 1
    )


def test_every_disagreement_is_listed_with_the_label_reason_and_the_check() -> None:
    result = run_model_pairs()
    pairs, _ = load_model_pairs()
    wrong = [p.id for p in pairs if predicted_missing(p)[0] != p.expected_missing]
    assert [d["id"] for d in result.disagreements] == wrong
    assert result.figures.false_missing + result.figures.missed_missing == len(wrong)
    assert all(d["reason"] and d["check"] for d in result.disagreements)
    assert "real-model" in result.render() and "\n" not in result.render()


def test_a_pair_without_a_reason_or_a_labeller_is_refused(tmp_path: Path) -> None:
    row = _rows()[0]
    path = tmp_path / "pairs.jsonl"
    for broken in ({**row, "reason": ""}, {k: v for k, v in row.items() if k != "labelled_by"}):
        path.write_text(json.dumps(broken) + "\n", encoding="utf-8")
        with pytest.raises(BenchFormatError):
            load_model_pairs(path)


def test_pairs_of_an_event_take_every_kind_round_robin() -> None:
    state = {
        "actions_taken": [{"id": "A1", "tool": "issue_refund", "item": "mirror", "amount_cents": 1500}],
        "customer_constraints": [{"id": f"C{n}", "text": f"constraint {n}"} for n in range(1, 6)],
        "open_questions": [{"id": "Q1", "text": "photo?"}],
        "decisions": [],
    }
    summary = {"actions_taken": ["A1"], "customer_constraints": [], "open_questions": [], "decisions": []}
    pairs = pairs_of_event(pinned_state=state, summary=summary, raw_output="{}", source={}, max_items=4)
    assert [(p["kind"], p["item"]["id"]) for p in pairs] == [
        ("actions_taken", "A1"),
        ("customer_constraints", "C1"),
        ("open_questions", "Q1"),
        ("customer_constraints", "C2"),
    ]
    assert pairs[0]["summary"]["narrative"] == ""  # no narrative given: an empty one, never an invented one
    assert [p["id"] for p in numbered(pairs, collection={"model": "m"})][:2] == ["mp-001", "mp-002"]


@pytest.mark.django_db(transaction=False)
def test_the_collector_runs_the_openai_backend_and_keeps_the_raw_reply(openai_server) -> None:
    """Over real HTTP to a loopback server: each replacing compaction gives pairs with the reply as sent."""
    text = Summary(
        decisions=[],
        actions_taken=["A1"],
        customer_constraints=["C1"],
        open_questions=[],
        narrative="The buyer's mirror arrived cracked.",
    ).model_dump_json()
    with openai_server([Reply(content=text)]) as fake:
        collected = collect([E01], model="fake-model", max_items=3)
    assert fake.requests and fake.requests[0]["body"]["model"] == "fake-model"
    assert collected.summaries >= 1 and collected.pairs
    first = collected.pairs[0]
    assert first["raw_output"] == text
    assert first["source"]["ticket"] == "E01-constraint-in-passing"
    assert first["summary"]["customer_constraints"] == ["C1"]
    assert first["summary"]["narrative"] == "The buyer's mirror arrived cracked."
    assert {p["kind"] for p in collected.pairs} <= {
        "actions_taken",
        "customer_constraints",
        "open_questions",
        "decisions",
    }


@pytest.mark.model
@pytest.mark.django_db
def test_the_collector_gathers_a_pair_live_from_the_real_model(local_model, settings) -> None:
    collected = collect([E01], model=local_model.model, max_items=2, max_summaries=1)
    assert collected.summaries >= 1, collected
    assert 1 <= len(collected.pairs) <= 2 * collected.summaries
    pair = collected.pairs[0]
    Summary.model_validate_json(pair["raw_output"])  # what the model wrote, schema-valid
    assert pair["source"]["summarizer_output_tokens"] > 0
    assert pair["item"].get("id")
