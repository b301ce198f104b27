"""The coverage benchmark: labelled pairs through the engine's own check, precision and recall of "missing"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.coverage_bench import BENCH_DIR, BenchFormatError, load_pairs, run_benchmark

CATEGORIES = {
    "paraphrase", "units", "negation", "proposal", "request", "refusal", "wrong_amount", "wrong_item",
    "inverted_preference", "answered_question", "reversed_decision", "id_reference",
}  # fmt: skip


def test_the_dev_pairs_meet_the_target_so_a_regression_in_the_check_fails() -> None:
    result = run_benchmark()
    assert result.dev.pairs >= 150
    assert result.dev.precision >= 0.95, result.wrong
    assert result.dev.recall >= 0.95, result.wrong


def test_the_benchmark_has_200_pairs_a_held_out_quarter_and_every_failure_mode() -> None:
    pairs = load_pairs()
    held_out = [p for p in pairs if p.held_out]
    assert len(pairs) >= 200 and len(held_out) >= 50
    assert {p.category for p in pairs} >= CATEGORIES
    # Both labels in each set, so neither precision nor recall is vacuous.
    for subset in (held_out, [p for p in pairs if not p.held_out]):
        assert {p.expected_missing for p in subset} == {True, False}
    assert len({p.id for p in pairs}) == len(pairs)


def test_the_result_renders_on_one_line_and_as_json() -> None:
    result = run_benchmark()
    line = result.render()
    assert "\n" not in line and f"dev {result.dev.pairs} pairs" in line and "held out" in line
    data = json.loads(json.dumps(result.as_json()))
    assert data["positive_class"] == "missing"
    assert data["all"]["pairs"] == data["dev"]["pairs"] + data["held_out"]["pairs"]


def test_a_checker_that_calls_everything_covered_scores_zero_recall(tmp_path: Path) -> None:
    """The figures count what they claim: a pair the check gets wrong shows up in precision or recall."""
    rows = [
        {"id": "x1", "kind": "actions_taken", "item": {"id": "A1", "tool": "issue_refund", "item": "parasol", "amount_cents": 2599},
         "entries": ["Refunded $25.99 for the parasol."], "expected": "missing"},  # labelled wrong on purpose
        {"id": "x2", "kind": "customer_constraints", "item": {"id": "C1", "text": "no replacement wanted"},
         "entries": ["replacement ok"], "expected": "missing", "held_out": True},
    ]  # fmt: skip
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = run_benchmark(path)
    assert (result.dev.recall, result.dev.missed_missing) == (0.0, 1)
    assert (result.held_out.precision, result.held_out.recall) == (1.0, 1.0)
    assert [w["id"] for w in result.wrong] == ["x1"]


@pytest.mark.parametrize(
    "row",
    [
        {"kind": "nothing", "item": {}, "entries": [], "expected": "missing"},
        {"kind": "decisions", "item": {"id": "D1", "text": "x"}, "entries": "x", "expected": "missing"},
        {"kind": "decisions", "item": {"id": "D1", "text": "x"}, "entries": ["x"], "expected": "yes"},
    ],
)
def test_a_malformed_line_is_refused_with_its_place(tmp_path: Path, row: dict[str, object]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(BenchFormatError, match=r"bad\.jsonl:1"):
        load_pairs(path)


def test_the_data_lives_in_evals_coverage() -> None:
    assert sorted(p.name for p in BENCH_DIR.glob("*.jsonl")) == ["dev.jsonl", "held_out.jsonl"]
