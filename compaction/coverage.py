"""The coverage check: does the summary carry every action, constraint and open question of the pinned state?

Pure functions over plain data. Matching is deliberately tolerant of wording ("refunded $40 for the
garden table" covers `issue_refund 4000 garden-table`) and strict about substance: an action needs
its tool's verb, its item and its amount; a constraint or question needs most of its content words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Verbs that say nothing about what a tool did to the order.
GENERIC_TOOL_WORDS = {
    "issue",
    "get",
    "create",
    "make",
    "do",
    "run",
    "call",
    "process",
    "submit",
    "send",
    "order",
    "orders",
    "item",
    "items",
    "pending",
    "delivered",
    "user",
    "tool",
}
STOPWORDS = {
    "a",
    "an",
    "the",
    "of",
    "to",
    "for",
    "and",
    "or",
    "in",
    "on",
    "at",
    "is",
    "are",
    "was",
    "be",
    "it",
    "its",
    "that",
    "this",
    "with",
    "by",
    "from",
    "as",
    "still",
    "i",
    "my",
    "me",
    "we",
    "you",
    "your",
    "they",
    "their",
    "has",
    "have",
    "had",
    "not",
    "no",
    "any",
    "some",
    "if",
    "so",
    "but",
}
WORD = re.compile(r"[a-z0-9]+")
# A constraint's polarity must survive: "no replacement wanted" is not covered by "wants a replacement".
NEGATIONS = {
    "no",
    "not",
    "never",
    "without",
    "nothing",
    "none",
    "nor",
    "t",
    "cannot",
    "decline",
    "declined",
    "declines",
    "refuse",
    "refused",
    "refuses",
    "dont",
    "doesnt",
    "didnt",
    "wont",
    "cant",
    "avoid",
    "rather",
}


def words(text: str) -> list[str]:
    return WORD.findall(text.casefold().replace("_", " ").replace("-", " "))


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _has_word(haystack: set[str], word: str) -> bool:
    stem = _stem(word)
    return any(w == word or _stem(w) == stem for w in haystack)


def amount_spellings(amount_cents: int) -> set[str]:
    """How an amount may be written: 4000, 40, 40.00 (and $40 / 40.00 reduce to these words)."""
    dollars, cents = divmod(amount_cents, 100)
    spellings = {str(amount_cents)}
    if cents == 0:
        spellings.add(str(dollars))
    spellings.add(f"{dollars}.{cents:02d}")
    return spellings


def _amounts_in(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d{2})?", text.replace(",", "")))


def action_covered(action: dict[str, Any], entries: Iterable[str]) -> bool:
    tool_words = [w for w in words(action.get("tool", "")) if w not in GENERIC_TOOL_WORDS] or words(
        action.get("tool", "")
    )
    item_words = [w for w in words(action.get("item", "")) if w not in STOPWORDS]
    amount = int(action.get("amount_cents") or 0)
    for entry in entries:
        present = set(words(entry))
        if not any(_has_word(present, w) for w in tool_words):
            continue
        if item_words and not all(_has_word(present, w) for w in item_words):
            continue
        if amount and not (amount_spellings(amount) & _amounts_in(entry)):
            continue
        return True
    return False


def _negated(found: Iterable[str]) -> bool:
    return any(w in NEGATIONS for w in found)


def text_covered(text: str, entries: Iterable[str], *, share: float = 0.5) -> bool:
    wanted = [w for w in words(text) if w not in STOPWORDS]
    if not wanted:
        return True
    negated = _negated(words(text))
    for entry in entries:
        present = set(words(entry))
        if _negated(present) != negated:
            continue
        found = sum(1 for w in wanted if _has_word(present, w))
        if found / len(wanted) >= share:
            return True
    return False


@dataclass(frozen=True)
class CoverageReport:
    covered: list[dict[str, Any]]
    missing: list[dict[str, Any]]

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        return {"covered": self.covered, "missing": self.missing}


def _ref(category: str, item: dict[str, Any], label: str) -> dict[str, Any]:
    return {"category": category, "id": item.get("id"), "at_turn": item.get("at_turn"), "label": label}


def check_coverage(pinned_state: dict[str, Any], summary: dict[str, Any]) -> CoverageReport:
    """Each action (tool, item, amount), constraint, open question and decision of the state, found or missing."""
    covered: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    for action in pinned_state.get("actions_taken", []):
        amount = action.get("amount_cents") or 0
        label = " ".join(
            part
            for part in (
                action.get("tool", ""),
                f"{amount} cents" if amount else "",
                action.get("item", ""),
                f"at turn {action['at_turn']}" if action.get("at_turn") else "",
                "(reversed)" if action.get("reversed") else "",
            )
            if part
        )
        ref = _ref("actions_taken", action, label)
        (covered if action_covered(action, summary.get("actions_taken", [])) else missing).append(ref)
    # Decisions too: the seed counts them among the four categories a summary must not lose.
    for category in ("customer_constraints", "open_questions", "decisions"):
        for entry in pinned_state.get(category, []):
            ref = _ref(category, entry, entry.get("text", ""))
            (covered if text_covered(entry.get("text", ""), summary.get(category, [])) else missing).append(
                ref
            )
    return CoverageReport(covered=covered, missing=missing)
