"""How the pages name things: the four summary categories, a pinned item in one line, the pins per turn."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from desk.pages.formatting import usd_cents

# The four categories a summary must preserve, in the order the pages show them.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("decisions", "Decisions"),
    ("actions_taken", "Actions taken"),
    ("customer_constraints", "Customer constraints"),
    ("open_questions", "Open questions"),
)
CATEGORY_LABELS = dict(CATEGORIES)


@dataclass(frozen=True)
class PinnedMark:
    """A pinned item shown against the turn it came from."""

    category: str
    id: str
    label: str


def item_label(category: str, item: dict[str, Any]) -> str:
    """One pinned item in a line: `issue_refund $40.00 garden-table (reversed)`, or a text item's text."""
    if category == "actions_taken":
        parts = [str(item.get("tool", ""))]
        if item.get("amount_cents"):
            parts.append(usd_cents(int(item["amount_cents"])))
        if item.get("item"):
            parts.append(str(item["item"]))
        if item.get("reversed"):
            parts.append("(reversed)")
        return " ".join(p for p in parts if p)
    return str(item.get("text", ""))


def pinned_marks_by_turn(state_json: dict[str, Any]) -> dict[int, list[PinnedMark]]:
    """Each pinned item of the four categories, keyed by the turn it came from."""
    marks: dict[int, list[PinnedMark]] = {}
    for category, _label in CATEGORIES:
        for item in state_json.get(category, []):
            at_turn = item.get("at_turn")
            if at_turn:
                marks.setdefault(int(at_turn), []).append(
                    PinnedMark(
                        category=category, id=str(item.get("id", "")), label=item_label(category, item)
                    )
                )
    return marks


@dataclass
class TurnPins:
    """The items pinned from one turn: the first few labelled, the rest counted."""

    marks: list[PinnedMark] = field(default_factory=list)
    more: int = 0  # pinned from the turn beyond `marks`
    categories: list[str] = field(default_factory=list)  # of every item pinned from the turn, each once


def pins_by_turn(state_json: dict[str, Any], *, turns: Container[int], limit: int) -> dict[int, TurnPins]:
    """The items pinned from each of `turns` (a page's window), in the order of `pinned_marks_by_turn`: at
    most `limit` labelled per turn, however many an agent recorded at one turn."""
    pins: dict[int, TurnPins] = {}
    for category, _label in CATEGORIES:
        for item in state_json.get(category, []):
            at_turn = item.get("at_turn")
            if not at_turn or int(at_turn) not in turns:
                continue
            turn = pins.setdefault(int(at_turn), TurnPins())
            if category not in turn.categories:
                turn.categories.append(category)
            if len(turn.marks) < limit:
                turn.marks.append(
                    PinnedMark(
                        category=category, id=str(item.get("id", "")), label=item_label(category, item)
                    )
                )
            else:
                turn.more += 1
    return pins
