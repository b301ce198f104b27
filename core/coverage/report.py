"""The coverage report: every action, constraint, open question and decision of the pinned state, covered
(with the summary entry that covered it, `by`) or missing (with why).

Pure: no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.coverage.matching import Match, TextKind, action_match, references_only, text_match


@dataclass(frozen=True)
class CoverageReport:
    covered: list[dict[str, Any]]
    missing: list[dict[str, Any]]

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        return {"covered": self.covered, "missing": self.missing}


def _ref(category: str, item: dict[str, Any], label: str) -> dict[str, Any]:
    return {"category": category, "id": item.get("id"), "at_turn": item.get("at_turn"), "label": label}


def action_label(action: dict[str, Any]) -> str:
    amount = action.get("amount_cents") or 0
    return " ".join(
        part
        for part in (
            str(action.get("tool", "")),
            f"{amount} cents" if amount else "",
            str(action.get("item", "") or ""),
            f"at turn {action['at_turn']}" if action.get("at_turn") else "",
            "(reversed)" if action.get("reversed") else "",
        )
        if part
    )


def _covering(field: str, entries: list[str], match: Match) -> dict[str, Any]:
    """Which summary entry covered the item: its field, its index there and its text."""
    assert match.entry is not None
    return {"field": field, "index": match.entry, "text": entries[match.entry]}


_FIELDS = ("actions_taken", "customer_constraints", "open_questions", "decisions")


def _referenced_elsewhere(item_id: Any, own: str, summary: dict[str, Any]) -> dict[str, Any] | None:
    """An entry of another field made only of id references, one of them this item's: a pinned id names one
    item whatever list the summary filed it under (a small model puts `C2` among the actions)."""
    if not item_id:
        return None
    for field in _FIELDS:
        if field == own:
            continue
        for index, entry in enumerate(str(e) for e in summary.get(field) or []):
            if str(item_id) in references_only(entry):
                return {"field": field, "index": index, "text": entry}
    return None


def check_coverage(pinned_state: dict[str, Any], summary: dict[str, Any]) -> CoverageReport:
    """Each action (tool, item, amount), constraint, open question and decision of the state, found or
    missing; each covered one names the summary entry that covered it (`by`), each missing one says why."""
    covered: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    for action in pinned_state.get("actions_taken") or []:
        ref = _ref("actions_taken", action, action_label(action))
        entries = [str(e) for e in summary.get("actions_taken") or []]
        match = action_match(action, entries)
        if match.covered:
            covered.append({**ref, "by": _covering("actions_taken", entries, match)})
        elif elsewhere := _referenced_elsewhere(action.get("id"), "actions_taken", summary):
            covered.append({**ref, "by": elsewhere})
        else:
            missing.append({**ref, "why": match.why})
    kinds: tuple[TextKind, ...] = ("customer_constraints", "open_questions", "decisions")
    for kind in kinds:
        for entry in pinned_state.get(kind) or []:
            text = str(entry.get("text", ""))
            ref = _ref(kind, entry, text)
            entries = [str(e) for e in summary.get(kind) or []]
            match = text_match(text, entries, kind=kind, item_id=entry.get("id"))
            if match.covered:
                covered.append({**ref, "by": _covering(kind, entries, match)})
            elif elsewhere := _referenced_elsewhere(entry.get("id"), kind, summary):
                covered.append({**ref, "by": elsewhere})
            else:
                missing.append({**ref, "why": match.why})
    return CoverageReport(covered=covered, missing=missing)
