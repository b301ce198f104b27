"""Matching one pinned item against the entries of one summary field: an action by its tool's verb family,
its item and its amount; a constraint, question or decision by its content words and their polarity.
The two halves share the id references and the best-match rule, so they stay one module (~400 lines).

Pure: no Django.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from core.coverage.clauses import (
    DECISION_WORDS,
    LIGHT,
    PROPOSALS,
    RESOLUTION_PHRASES,
    RESOLUTIONS,
    Clause,
    clauses,
    cue_only,
    mentions_id,
    stem_set,
)
from core.coverage.money import amounts_in
from core.coverage.words import STOPWORDS, normalize_name, stem, words
from core.identity import normalize_item


@dataclass(frozen=True)
class Match:
    """One pinned item against one summary field: covered or missing, and why."""

    covered: bool
    why: str = ""
    score: int = 0  # how close a miss came; the closest miss gives the reason
    entry: int | None = None  # the index of the entry that covered it


# An entry that is an id reference ("C1", "A1, A2", "Q1 and Q2"), or one that opens with one
# ("C1: no flights before 11am"). Pinned ids are a capital letter of the state's lists and a number.
_ID = r"[ACQD]\d+"
_ONLY_IDS = re.compile(rf"\s*\[?\(?{_ID}\)?(?:\s*(?:,|;|/|&|\band\b)?\s*\(?{_ID}\)?)*\]?\s*\.?\s*")
_LEADING_ID = re.compile(rf"\s*\[?\(?(?P<id>{_ID})\)?\]?\s*(?::|-|\u2013|\u2014|\))\s*\S")


def id_references(entry: str) -> frozenset[str] | None:
    """The pinned ids an entry refers to when it is an id reference (or opens with one), else None.

    Resolved before any number or text matching: the digit in `C1` is not a number of the item, and an
    entry that is an id covers that item and nothing else.
    """
    if _ONLY_IDS.fullmatch(entry):
        return frozenset(re.findall(_ID, entry))
    leading = _LEADING_ID.match(entry)
    if leading:
        return frozenset({leading.group("id")})
    return None


def references_only(entry: str) -> frozenset[str]:
    """The pinned ids of an entry made only of id references ("C1", "A1, A2"); empty for any other entry."""
    return frozenset(re.findall(_ID, entry)) if _ONLY_IDS.fullmatch(entry) else frozenset()


def _matches(item_id: str | None, entries: Iterable[str], match: Callable[[str], Match]) -> Iterable[Match]:
    """Each entry's match, an id reference resolved first: it covers its item and nothing else."""
    for entry in entries:
        refs = id_references(entry)
        if refs is None:
            yield match(entry)
        elif item_id and item_id in refs:
            yield Match(True, "named by its id", 10)
        else:
            yield Match(False, "the entry refers to another item by its id", 0)


def _best(matches: Iterable[Match], nothing: str) -> Match:
    best: Match | None = None
    for index, match in enumerate(matches):
        if match.covered:
            return replace(match, entry=index)
        if best is None or match.score > best.score:
            best = match
    return best or Match(False, nothing)


# Tool verbs, grouped into families of the words a summary uses for what the tool did.
VERB_FAMILIES: dict[str, frozenset[str]] = {
    "refund": stem_set("refund refunded reimbursed credited repaid repay"),
    "cancel": stem_set("cancel cancelled canceled cancellation"),
    "return": stem_set("return returned rma"),
    "exchange": stem_set("exchange exchanged swap swapped"),
    "replace": stem_set("replace replaced replacement reshipped resent"),
    "modify": stem_set(
        "modify modified modification changed change updated update amended edited switched corrected altered"
    ),
    "hold": stem_set("hold held paused intercepted stopped"),
    "message": stem_set(
        "message messaged contacted emailed wrote notified informed told pinged reached escalated"
    ),
    "send": stem_set("send sent issued gave given mailed emailed"),
    "book": stem_set("book booked reserved scheduled arranged"),
    "order": stem_set("order ordered bought reordered"),
    "escalate": stem_set("escalate escalated transferred handed"),
    "charge": stem_set("charge charged billed"),
}
_FAMILY_OF_WORD = {
    stem(w): family
    for family, ws in {
        "refund": "refund reimburse credit",
        "cancel": "cancel",
        "return": "return",
        "exchange": "exchange swap",
        "replace": "replace reship",
        "modify": "modify update change edit amend",
        "hold": "hold pause",
        "message": "message email contact notify",
        "send": "send issue",
        "book": "book reserve",
        "order": "order",
        "escalate": "escalate transfer",
        "charge": "charge",
    }.items()
    for w in ws.split()
}
# Verbs that say little on their own: another verb in the tool name wins ("book_return" is a return).
_WEAK_VERBS = stem_set("issue book send order make create process submit do run get call")
# Tool-name words that are neither the verb nor a distinguishing object.
GENERIC_TOOL_WORDS = stem_set(
    "pending delivered order orders item items user tool full partial issue process make create submit "
    "get do run call new request customer buyer record parcel package shipment"
)
_OBJECT_SYNONYMS = {
    stem(key): stem_set(ws)
    for key, ws in {
        "parcel": "parcel package shipment delivery order",
        "seller": "seller merchant vendor shop store",
        "payment": "payment pay card method billing",
        "address": "address shipping",
        "certificate": "certificate voucher coupon credit gift",
        "flights": "flights flight",
        "baggages": "baggages baggage bags bag luggage suitcase",
        "passengers": "passengers passenger traveller traveler names name",
        "reservation": "reservation reserved booking booked",
    }.items()
}
_REFUND_PHRASES = re.compile(
    r"\b(?:money back|paid back|put back|back to (?:the |her |his |their |your )?card)\b"
)


@dataclass(frozen=True)
class _Tool:
    family: str | None
    verbs: frozenset[str]
    objects: tuple[str, ...]


def _tool(tool: str) -> _Tool:
    stems = [stem(w) for w in normalize_name(tool).split()]
    candidates = [s for s in stems if s in _FAMILY_OF_WORD]
    strong = [s for s in candidates if s not in _WEAK_VERBS]
    verb = (strong or candidates or [""])[0]
    family = _FAMILY_OF_WORD.get(verb)
    if family is None:
        rest = [s for s in stems if s not in GENERIC_TOOL_WORDS] or stems
        return _Tool(None, frozenset(rest[:1]), tuple(rest[1:]))
    objects = tuple(
        s for s in stems if s != verb and s not in GENERIC_TOOL_WORDS and s not in _FAMILY_OF_WORD
    )
    return _Tool(family, frozenset(VERB_FAMILIES[family]), objects)


def _verb_positions(clause: Clause, tool: _Tool) -> list[int]:
    positions = [i for i, s in enumerate(clause.stems) if s in tool.verbs]
    if not positions and tool.family == "refund" and _REFUND_PHRASES.search(clause.text):
        positions = [len(clause.stems) - 1]
    return positions


def _item_words(action: dict[str, Any]) -> list[str]:
    item = normalize_name(str(action.get("item") or ""))
    if not item or item == normalize_name(str(action.get("tool") or "")):
        return []
    return [w.lstrip("#") for w in item.split() if w.lstrip("#") and w not in STOPWORDS]


def _action_clause_state(clause: Clause, verbs: list[int]) -> str:
    """done, negated, future or proposed: what a clause says about the action it names."""
    if clause.negated or any(not clause.positive[i] for i in verbs):
        return "negated"
    if clause.future:
        return "future"
    if clause.proposal and not clause.done:
        return "proposed"
    return "done"


def _only_done(clause: Clause) -> bool:
    """A clause that follows a proposal and says it was carried out: "and processed", "and confirmed"."""
    return clause.done and not clause.negated and not clause.future and not clause.proposal


_ACTION_WHY = {
    "negated": "the summary says it did not happen",
    "reversed": "the summary says it was reversed",
    "future": "the summary says it will or may happen, not that it happened",
    "proposed": "the summary says it was proposed, promised or requested, not done",
}


def _structured(entry: str) -> dict[str, Any] | None:
    """An entry that is itself a pinned action as JSON (the pinned-state message of a context)."""
    if not entry.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(entry)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("tool"), str) else None


def _same_action(action: dict[str, Any], other: dict[str, Any]) -> Match:
    same = (
        normalize_name(str(action.get("tool") or "")) == normalize_name(str(other.get("tool") or ""))
        # The guard's item key: `the garden tables` and `table (garden)` are the pinned `garden-table`.
        and normalize_item(str(action.get("item") or "")) == normalize_item(str(other.get("item") or ""))
        and int(action.get("amount_cents") or 0) == int(other.get("amount_cents") or 0)
    )
    if not same:
        return Match(False, "no entry is this action", 1)
    if bool(other.get("reversed")) and not action.get("reversed"):
        return Match(False, _ACTION_WHY["reversed"], 4)
    return Match(True)


def _action_match(action: dict[str, Any], entry: str) -> Match:
    other = _structured(entry)
    if other is not None:
        return _same_action(action, other)
    tool = _tool(str(action.get("tool") or ""))
    amount = int(action.get("amount_cents") or 0)
    reversed_action = bool(action.get("reversed"))
    found, rest = amounts_in(entry)
    parts = clauses(rest)
    entry_stems = {s for c in parts for s in c.stems}
    by_id = mentions_id(rest, action.get("id"))

    if amount and found.any and not found.names(amount):
        return Match(False, f"wrong amount (the state says {amount} cents)", 5)
    verb_clauses = [(i, _verb_positions(c, tool)) for i, c in enumerate(parts)]
    verb_clauses = [(i, v) for i, v in verb_clauses if v]
    if by_id:
        verb_clauses += [(i, []) for i, c in enumerate(parts) if mentions_id(c.text, action.get("id"))]
    if not verb_clauses:
        return Match(False, f"no entry says what {action.get('tool')} did", 0)
    states = []
    for i, verbs in verb_clauses:
        state = _action_clause_state(parts[i], verbs)
        if state == "proposed" and i + 1 < len(parts) and _only_done(parts[i + 1]):
            state = "done"  # "refund approved and processed"
        states.append(state)
    # "cancellation of X ($154.32) failed": a clause of nothing but a negation speaks for the entry.
    # "refund for the table: $40 - pending approval": so does one of a proposal or the future alone.
    for c in parts:
        if cue_only(c) and c.stems[:1] != ("as",) and not any(s in tool.verbs for s in c.stems):
            if c.negated:
                states = ["negated" for _ in states]
            elif c.future or (c.proposal and not c.done):
                states = [("future" if c.future else "proposed") if s == "done" else s for s in states]
    # "refunded $40 for the table, later reversed": a reversal anywhere in the entry undoes it.
    if not reversed_action and any(c.reverses(allowed=tool.verbs) and not c.negated for c in parts):
        states = ["reversed" for _ in states]
    if "done" not in states:
        worst = next(s for s in ("negated", "reversed", "future", "proposed") if s in states)
        return Match(False, _ACTION_WHY[worst], 4)
    if tool.objects and not by_id:
        missing_objects = [o for o in tool.objects if not entry_stems & _OBJECT_SYNONYMS.get(o, {o})]
        if missing_objects:
            return Match(False, f"the entry does not name the {', '.join(missing_objects)}", 2)
    item = [stem(w) for w in _item_words(action)]
    if item and not by_id and not all(w in entry_stems for w in item):
        ids = [w for w in item if any(ch.isdigit() for ch in w)]
        head_only = (
            not ids and amount and found.names(amount) and item[-1] in entry_stems
        )  # "the table" for garden-table, when the verb and the amount match
        if not head_only:
            return Match(False, f"the entry does not name the item {action.get('item')}", 3)
    if amount and not found.any and not by_id:
        return Match(False, f"the entry does not state the amount ({amount} cents)", 3)
    return Match(True)


def action_covered(action: dict[str, Any], entries: Iterable[str]) -> bool:
    """Does one entry say this action was done: its tool's verb, its item, its amount (or its id)?"""
    return action_match(action, entries).covered


def action_match(action: dict[str, Any], entries: Iterable[str]) -> Match:
    return _best(
        _matches(action.get("id"), entries, lambda e: _action_match(action, e)),
        "the summary lists no actions",
    )


TextKind = Literal["customer_constraints", "open_questions", "decisions"]


def _content(parts: list[Clause]) -> dict[str, set[bool]]:
    out: dict[str, set[bool]] = {}
    for c in parts:
        for s, pos in zip(c.stems, c.positive, strict=True):
            if s and s not in LIGHT and not s.isdigit():
                out.setdefault(s, set()).add(pos)
    return out


def _verbatim(text: str) -> str:
    return " ".join(normalize_name(text).split())


def _text_match(text: str, entry: str, *, kind: TextKind, share: float, item_id: str | None) -> Match:
    # An entry that carries the item word for word carries it, whatever its words are ("If so, do it.").
    if _verbatim(text) and _verbatim(text) == _verbatim(entry):
        return Match(True, "word for word", 10)
    wanted_amounts, wanted_rest = amounts_in(text)
    wanted_parts = clauses(wanted_rest)
    wanted = _content(wanted_parts)
    if not wanted:  # a text of light words only ("no calls please" is not one; "not now" is)
        wanted = {
            s: {p}
            for c in wanted_parts
            for s, p in zip(c.stems, c.positive, strict=True)
            if s not in STOPWORDS
        }
    wanted_stems = {s for c in wanted_parts for s in c.stems}
    found_amounts, rest = amounts_in(entry)
    parts = clauses(rest)
    by_id = mentions_id(rest, item_id)
    present = _content(parts)

    if wanted_amounts.stated and found_amounts.stated and not (wanted_amounts.stated & found_amounts.stated):
        return Match(False, "the entry names a different amount", 5)
    hits = [s for s in wanted if s in present]
    if not by_id and (not wanted or len(hits) / len(wanted) < share):
        return Match(False, "no entry carries its content", len(hits))
    wanted_numbers = {n for c in wanted_parts for n in c.numbers}
    found_numbers = {n for c in parts for n in c.numbers}
    if wanted_numbers and found_numbers and not wanted_numbers & found_numbers:
        return Match(False, "the entry names a different time, date or number", 5)
    # The clauses about the item, and those about nothing else ("..., later reversed", "answered").
    relevant = [c for c in parts if set(c.stems) & set(hits)] + [c for c in parts if cue_only(c)]
    if by_id:
        relevant = [c for c in parts if mentions_id(c.text, item_id)] + relevant
    relevant = relevant or parts

    if kind == "open_questions":
        # A question that itself reads as settled ("customer to send X") keeps its own words.
        reads_open = any(c.open_marker or c.future for c in wanted_parts) or " to " in f" {text} "
        own = set() if reads_open else wanted_stems
        for c in relevant:
            fresh = {s for s in c.stems if s in RESOLUTIONS and s not in own}
            if any(p in f" {c.text} " for p in RESOLUTION_PHRASES):
                fresh.add("in hand")
            if fresh and not (c.open_marker or c.future) and not c.negated and all(c.positive):
                return Match(False, "the summary says the question was answered", 4)
        return Match(True)

    if any(c.reverses(allowed=wanted_stems) and not c.negated for c in relevant):
        return Match(False, "the summary says it was reversed or withdrawn", 4)
    flipped = [s for s in hits if not (wanted[s] & present[s])]
    if flipped and not by_id:
        named = {stem(w): w for w in words(wanted_rest)}
        about = ", ".join(sorted(repr(named.get(s, s)) for s in flipped))
        return Match(False, f"the summary says the opposite about {about}", 4)
    if by_id and any(c.negated for c in relevant[:1]):
        return Match(False, "the summary says the opposite", 4)
    if kind == "decisions":
        wanted_proposal = any(s in PROPOSALS - DECISION_WORDS for s in wanted_stems)
        for c in relevant:
            soft = {s for s in c.stems if s in PROPOSALS and s not in DECISION_WORDS}
            if soft - wanted_stems and not wanted_proposal:
                return Match(False, "the summary says it was only proposed or requested, not decided", 4)
    return Match(True)


def text_covered(
    text: str,
    entries: Iterable[str],
    *,
    share: float = 0.5,
    kind: TextKind = "customer_constraints",
    item_id: str | None = None,
) -> bool:
    """Does one entry carry this constraint, question or decision, with the same polarity and status?"""
    return text_match(text, entries, share=share, kind=kind, item_id=item_id).covered


def text_match(
    text: str,
    entries: Iterable[str],
    *,
    share: float = 0.5,
    kind: TextKind = "customer_constraints",
    item_id: str | None = None,
) -> Match:
    return _best(
        _matches(item_id, entries, lambda e: _text_match(text, e, kind=kind, share=share, item_id=item_id)),
        f"the summary's {kind} list is empty",
    )
