"""Read eval inputs: sundry-ticket/1 files and tau-bench / tau2-bench results files, told apart by shape."""

from __future__ import annotations

import json
from pathlib import Path

from desk.importer import ImportFileError, ImportTicket, parse_documents, validate_documents
from evals.tau import DEFAULT_BUDGET, TauFormatError, is_tau1, is_tau2, tau_documents

SUFFIXES = {".json", ".jsonl"}


def expand(paths: list[Path]) -> list[Path]:
    """Files as given; a directory stands for its .json and .jsonl files, in name order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        else:
            files.append(path)
    return files


def detect(text: str) -> str:
    """'tau2', 'tau' or 'sundry-ticket/1' (anything else is left to the sundry-ticket parser to reject)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return "sundry-ticket/1"  # JSON Lines, or broken: the importer's parser says which
    if is_tau2(data):
        return "tau2"
    if is_tau1(data):
        return "tau"
    return "sundry-ticket/1"


def load(path: Path, *, tau_budget: int = DEFAULT_BUDGET) -> tuple[str, list[ImportTicket]]:
    """The format of one file and its tickets, validated; raises ImportFileError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: cannot read: {exc}") from None
    kind = detect(text)
    if kind in {"tau2", "tau"}:
        try:
            return kind, tau_documents(json.loads(text), budget=tau_budget)
        except (TauFormatError, ValueError) as exc:
            raise ImportFileError(f"{path}: {exc}") from None
    return kind, validate_documents(parse_documents(text, source=str(path)), source=str(path))
