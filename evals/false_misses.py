"""False coverage misses in the eval: per file, the share of replacing compactions whose coverage report flags
an item the summary does carry.

Pure: plain data in, figures out (no Django). Each replacing compaction is given as
`{"coverage": {"covered": [...], "missing": [{"id", "category", "label", "why"}]}, "summary": {...},
"pinned_state": {...}}` (its `CompactionEvent.coverage`, its summary and its snapshot's pinned state).

A miss is judged false by a rule that is not the check (`judge_miss`, replaceable), and deliberately literal,
so what it calls false is false beyond argument and the rate is a floor (a paraphrase the check misses is
counted by the labelled real-model pairs, not here):

1. **Referenced by id.** An entry of any of the four fields is made only of id references (`C1`, `["C1",
   "C2"]`, `A1, A2`, `(Q1)`) and one of them is the missed item's id.
2. **The same facts, literally.** An entry of any of the four fields carries the item word for word: a
   constraint's, question's or decision's text (case, spacing and punctuation aside), or, for an action, its
   tool, its item and, when it has one, its amount (`$40`, `$40.00`, `4000 cents`), or the pinned action as
   JSON; and the entry adds no negation, reversal or answer word the item does not have ("A1 not issued",
   "Q1 answered" stay misses).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

SUMMARY_FIELDS = ("decisions", "actions_taken", "customer_constraints", "open_questions")
_ID = r"[ACQD]\d+"
_ONLY_IDS = re.compile(
    rf"[\s\[\]()\"',;/&.]*{_ID}(?:(?:[\s\[\]()\"',;/&.]|\band\b)+{_ID})*[\s\[\]()\"',;/&.]*"
)
# Words that change what an entry says about an item: an entry that adds one does not state the same facts.
_CUE_WORDS = (
    "not no never none denied declined refused rejected failed reversed revoked withdrawn cancelled canceled "
    "answered received resolved provided closed pending proposed offered requested will would may might could "
    "without instead"
)
_CUES = frozenset(_CUE_WORDS.split())

Judge = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], str | None]


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[\u200b\u200c\u200d\u2060\ufeff\u00ad]", "", text)
    return " ".join(re.findall(r"[^\W_]+", text))


def _contains(haystack: str, needle: str) -> bool:
    return bool(needle) and f" {needle} " in f" {haystack} "


def _adds_cue(entry: str, item_text: str) -> bool:
    """Does the entry say `not`, `answered`, ... more often than the item itself does?"""
    said, own = (
        Counter(w for w in entry.split() if w in _CUES),
        Counter(w for w in item_text.split() if w in _CUES),
    )
    return bool(said - own)


def _entries(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [(field, str(e)) for field in SUMMARY_FIELDS for e in summary.get(field) or []]


def _pinned(state: dict[str, Any], category: str, item_id: Any) -> dict[str, Any] | None:
    return next((i for i in state.get(category) or [] if i.get("id") == item_id), None)


_AMOUNT = re.compile(
    r"\$\s?(?P<money>\d[\d,]*(?:\.\d{2})?)|(?P<cents>\d+)\s?cents\b|(?P<decimal>\d+\.\d{2})\b"
)


def _cents_in(entry: str) -> set[int]:
    """The amounts an entry writes out literally: `$40`, `$40.00`, `4000 cents`, `40.00`."""
    out = set()
    for m in _AMOUNT.finditer(entry):
        if m.group("cents"):
            out.add(int(m.group("cents")))
        else:
            out.add(round(float((m.group("money") or m.group("decimal")).replace(",", "")) * 100))
    return out


def _states_action(action: dict[str, Any], entry: str) -> bool:
    if entry.lstrip().startswith("{"):
        try:
            other = json.loads(entry)
        except ValueError:
            other = None
        if isinstance(other, dict):
            return (
                _norm(str(other.get("tool") or "")) == _norm(str(action.get("tool") or ""))
                and _norm(str(other.get("item") or "")) == _norm(str(action.get("item") or ""))
                and int(other.get("amount_cents") or 0) == int(action.get("amount_cents") or 0)
                and bool(other.get("reversed")) == bool(action.get("reversed"))
            )
    text = _norm(entry)
    tool, item = _norm(str(action.get("tool") or "")), _norm(str(action.get("item") or ""))
    amount = int(action.get("amount_cents") or 0)
    if not (_contains(text, tool) and (not item or _contains(text, item))):
        return False
    if amount and amount not in _cents_in(entry):
        return False
    return not _adds_cue(text, f"{tool} {item}")


def judge_miss(miss: dict[str, Any], state: dict[str, Any], summary: dict[str, Any]) -> str | None:
    """Why the miss is false (the summary does carry the item), or None when the miss stands."""
    item_id = miss.get("id")
    for field, entry in _entries(summary):
        if item_id and _ONLY_IDS.fullmatch(entry) and item_id in re.findall(_ID, entry):
            return f"referenced by its id in {field}: {entry!r}"
    item = _pinned(state, str(miss.get("category") or ""), item_id)
    if item is None:
        return None
    for field, entry in _entries(summary):
        if miss.get("category") == "actions_taken":
            if _states_action(item, entry):
                return f"stated with the same tool, item and amount in {field}: {entry!r}"
            continue
        wanted, text = _norm(str(item.get("text") or "")), _norm(entry)
        if wanted and _contains(text, wanted) and not _adds_cue(text, wanted):
            return f"stated word for word in {field}: {entry!r}"
    return None


def false_miss_figures(
    events: Iterable[dict[str, Any]], *, judge: Judge = judge_miss, examples: int = 5
) -> dict[str, Any]:
    """Over replacing compactions: how many carry a coverage miss, how many a false one, and the rates.

    `false_miss_rate` is the share of replacing compactions carrying at least one false miss (issue 21's
    "57 of 79 replacing compactions carried a miss, every one false" is this figure at 0.72);
    `false_share_of_misses` the share of all misses that are false."""
    compactions = with_miss = with_false = misses = false = 0
    shown: list[dict[str, Any]] = []
    for event in events:
        compactions += 1
        missing = list((event.get("coverage") or {}).get("missing") or [])
        state, summary = event.get("pinned_state") or {}, event.get("summary") or {}
        verdicts = [(m, judge(m, state, summary)) for m in missing]
        falses = [(m, why) for m, why in verdicts if why]
        misses += len(missing)
        false += len(falses)
        with_miss += bool(missing)
        with_false += bool(falses)
        for m, why in falses:
            if len(shown) < examples:
                shown.append(
                    {"id": m.get("id"), "category": m.get("category"), "check": m.get("why"), "false": why}
                )
    return {
        "replacing_compactions": compactions,
        "with_miss": with_miss,
        "with_false_miss": with_false,
        "misses": misses,
        "false_misses": false,
        "false_miss_rate": round(with_false / compactions, 4) if compactions else 0.0,
        "false_share_of_misses": round(false / misses, 4) if misses else 0.0,
        "examples": shown,
    }


def render_false_misses(by_file: dict[str, dict[str, Any]]) -> list[str]:
    """One line per file: replacing compactions, those with a miss, those with a false miss (the rate)."""
    lines = [
        "coverage misses on replacing compactions (false: the summary carries the item by id or verbatim)"
    ]
    for name, figures in by_file.items():
        f = figures.get("false_misses")
        if not f:
            continue
        if f["replacing_compactions"] == 0:
            recorded = sum(figures.get("compactions", {}).get(s, 0) for s in ("applied", "forced"))
            lines.append(
                f"  {name}: " + ("coverage not recorded per event" if recorded else "no replacing compaction")
            )
            continue
        lines.append(
            f"  {name}: {f['replacing_compactions']} compactions, {f['with_miss']} with a miss, "
            f"{f['with_false_miss']} with a false miss (false-miss rate {100 * f['false_miss_rate']:.0f}%; "
            f"{f['false_misses']} of {f['misses']} misses false)"
        )
    return lines
