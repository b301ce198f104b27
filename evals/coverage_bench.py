"""The coverage benchmark: labelled (pinned item, summary) pairs, run through the engine's own check.

Pure: reads JSON Lines from `evals/coverage/` and calls `core.coverage.check_coverage`. Each line is
one pair:

    {"id": "negation-01", "category": "negation", "kind": "actions_taken",
     "item": {"id": "A1", "tool": "issue_refund", "item": "garden-table", "amount_cents": 4000},
     "entries": ["The refund of $40 for the garden table was NOT issued."],   # or "summary": {...}
     "expected": "missing", "held_out": false}

"Missing" is the positive class (what the check exists to catch): precision is the share of the check's
misses that are real, recall the share of real misses it catches. The held-out pairs were written after
the checker was finished and are reported on their own.

The real-model pairs (`evals/fixtures/coverage/model_pairs.jsonl`, collected by `manage.py collect_model_pairs`
from summaries SmolLM2 wrote through the desk's `openai` backend, then labelled by reading) are a third set,
run by `run_model_pairs` and reported apart: they must carry a label and a one-line reason each.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.coverage import check_coverage

BENCH_DIR = Path(__file__).resolve().parent / "coverage"
MODEL_PAIRS = Path(__file__).resolve().parent / "fixtures" / "coverage" / "model_pairs.jsonl"
KINDS = ("actions_taken", "customer_constraints", "open_questions", "decisions")


class BenchFormatError(ValueError):
    """A benchmark line that is not a labelled pair."""


@dataclass(frozen=True)
class Pair:
    id: str
    category: str
    kind: str
    item: dict[str, Any]
    summary: dict[str, Any]
    expected_missing: bool
    held_out: bool
    reason: str = ""


@dataclass(frozen=True)
class Figures:
    """Counts and precision/recall of "missing" over a set of pairs."""

    pairs: int
    true_missing: int  # the check said missing, the label says missing
    false_missing: int  # the check said missing, the label says covered
    missed_missing: int  # the check said covered, the label says missing

    @property
    def precision(self) -> float:
        flagged = self.true_missing + self.false_missing
        return self.true_missing / flagged if flagged else 1.0

    @property
    def recall(self) -> float:
        actual = self.true_missing + self.missed_missing
        return self.true_missing / actual if actual else 1.0

    def as_json(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "true_missing": self.true_missing,
            "false_missing": self.false_missing,
            "missed_missing": self.missed_missing,
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
        }


@dataclass(frozen=True)
class BenchResult:
    dev: Figures
    held_out: Figures
    wrong: list[dict[str, Any]] = field(default_factory=list)  # each pair the check got wrong

    @property
    def all(self) -> Figures:
        return Figures(
            pairs=self.dev.pairs + self.held_out.pairs,
            true_missing=self.dev.true_missing + self.held_out.true_missing,
            false_missing=self.dev.false_missing + self.held_out.false_missing,
            missed_missing=self.dev.missed_missing + self.held_out.missed_missing,
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "positive_class": "missing",
            "dev": self.dev.as_json(),
            "held_out": self.held_out.as_json(),
            "all": self.all.as_json(),
            "wrong": self.wrong,
        }

    def render(self) -> str:
        d, h = self.dev, self.held_out
        return (
            f"coverage check ('missing'): dev {d.pairs} pairs precision {d.precision:.2f} recall {d.recall:.2f}"
            f" | held out {h.pairs} pairs precision {h.precision:.2f} recall {h.recall:.2f}"
        )


def _pair(row: Any, where: str) -> Pair:
    if not isinstance(row, dict):
        raise BenchFormatError(f"{where}: not a JSON object")
    kind = row.get("kind")
    if kind not in KINDS:
        raise BenchFormatError(f"{where}: kind must be one of {', '.join(KINDS)}")
    item = row.get("item")
    if not isinstance(item, dict):
        raise BenchFormatError(f"{where}: item must be an object")
    if row.get("expected") not in ("covered", "missing"):
        raise BenchFormatError(f"{where}: expected must be 'covered' or 'missing'")
    if isinstance(row.get("summary"), dict):
        summary = {k: list(row["summary"].get(k) or []) for k in KINDS}
    elif isinstance(row.get("entries"), list) and all(isinstance(e, str) for e in row["entries"]):
        summary = {k: [] for k in KINDS}
        summary[kind] = list(row["entries"])
    else:
        raise BenchFormatError(f"{where}: needs 'entries' (a list of strings) or 'summary' (an object)")
    return Pair(
        id=str(row.get("id") or where),
        category=str(row.get("category") or ""),
        kind=kind,
        item=item,
        summary=summary,
        expected_missing=row["expected"] == "missing",
        held_out=bool(row.get("held_out")),
        reason=str(row.get("reason") or ""),
    )


def load_pairs(path: Path | str | None = None) -> list[Pair]:
    """The pairs of one JSON Lines file, or of every `*.jsonl` in a folder (default: evals/coverage/)."""
    root = Path(path) if path is not None else BENCH_DIR
    files = sorted(root.glob("*.jsonl")) if root.is_dir() else [root]
    pairs = []
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                pairs.append(_pair(json.loads(line), f"{file.name}:{number}"))
    return pairs


def predicted_missing(pair: Pair) -> tuple[bool, str]:
    """Does the engine's check call this pair's item missing, and why?"""
    report = check_coverage({pair.kind: [pair.item]}, pair.summary)
    why = next((m.get("why", "") for m in report.missing), "")
    return bool(report.missing), why


def _figures(results: Iterable[tuple[Pair, bool]]) -> Figures:
    tp = fp = fn = n = 0
    for pair, predicted in results:
        n += 1
        if predicted and pair.expected_missing:
            tp += 1
        elif predicted:
            fp += 1
        elif pair.expected_missing:
            fn += 1
    return Figures(pairs=n, true_missing=tp, false_missing=fp, missed_missing=fn)


def run_benchmark(path: Path | str | None = None) -> BenchResult:
    results: list[tuple[Pair, bool]] = []
    wrong: list[dict[str, Any]] = []
    for pair in load_pairs(path):
        predicted, why = predicted_missing(pair)
        results.append((pair, predicted))
        if predicted != pair.expected_missing:
            wrong.append(
                {
                    "id": pair.id,
                    "held_out": pair.held_out,
                    "expected": "missing" if pair.expected_missing else "covered",
                    "why": why,
                }
            )
    return BenchResult(
        dev=_figures(r for r in results if not r[0].held_out),
        held_out=_figures(r for r in results if r[0].held_out),
        wrong=wrong,
    )


@dataclass(frozen=True)
class ModelPairsResult:
    """The check on the real-model pairs: the figures, and every pair where it and the label disagree."""

    figures: Figures
    labelled_by: list[str]
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "positive_class": "missing",
            **self.figures.as_json(),
            "labelled_by": self.labelled_by,
            "disagreements": self.disagreements,
        }

    def render(self) -> str:
        f = self.figures
        return (
            f"coverage check on real-model summaries ('missing'): {f.pairs} pairs, "
            f"{f.true_missing + f.missed_missing} labelled missing, precision {f.precision:.2f} "
            f"recall {f.recall:.2f} ({f.false_missing} false misses, {f.missed_missing} misses not caught)"
        )


def load_model_pairs(path: Path | str | None = None) -> tuple[list[Pair], list[str]]:
    """The labelled real-model pairs and who labelled them; each must have a label, a reason and a labeller."""
    file = Path(path) if path is not None else MODEL_PAIRS
    pairs: list[Pair] = []
    labellers: list[str] = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{file.name}:{number}"
        row = json.loads(line)
        if not isinstance(row, dict) or not str(row.get("reason") or "").strip():
            raise BenchFormatError(f"{where}: a real-model pair needs its label's one-line reason")
        if not str(row.get("labelled_by") or "").strip():
            raise BenchFormatError(f"{where}: a real-model pair names who labelled it (labelled_by)")
        if str(row["labelled_by"]) not in labellers:
            labellers.append(str(row["labelled_by"]))
        pairs.append(_pair(row, where))
    return pairs, labellers


def run_model_pairs(path: Path | str | None = None) -> ModelPairsResult:
    pairs, labellers = load_model_pairs(path)
    results: list[tuple[Pair, bool]] = []
    disagreements: list[dict[str, Any]] = []
    for pair in pairs:
        predicted, why = predicted_missing(pair)
        results.append((pair, predicted))
        if predicted != pair.expected_missing:
            disagreements.append(
                {
                    "id": pair.id,
                    "kind": pair.kind,
                    "item_id": pair.item.get("id"),
                    "label": "missing" if pair.expected_missing else "covered",
                    "reason": pair.reason,
                    "check": f"missing: {why}" if predicted else "covered",
                }
            )
    return ModelPairsResult(figures=_figures(results), labelled_by=labellers, disagreements=disagreements)
