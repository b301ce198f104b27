"""Clauses: a text cut at ; . , parentheses and but/because/..., each clause read on its own for negation,
reversal, the future, proposals and resolutions, so that "the refund was not issued" or "a refund was
proposed" do not read as a refund issued.

Pure: no Django.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from core.coverage.words import STOPWORDS, WORD, stem


def stem_set(text: str) -> frozenset[str]:
    """Cue words are written as words and compared as stems."""
    return frozenset(stem(w) for w in text.split())


# Negation of the whole clause: "the refund was not issued", "replacement declined".
NEGATIONS = stem_set(
    "not never none nothing neither nor denied deny declined decline refused refuse rejected reject "
    "failed fail unable unsuccessful nobody dont doesnt didnt wont cant against errored bounced"
)
# Negation of what follows in the clause: "refund issued with no return", "refund instead of a replacement".
FORWARD_NEGATIONS = ("no", "without", "instead of", "rather than", "except", "other than", "in place of")
# What undoes a decision, a constraint, or an action that was not reversed.
REVERSALS = stem_set(
    "reversed reverse revoked revoke rescinded rescind withdrew withdrawn withdraw overturned overruled "
    "retracted undone undo voided void clawback chargeback cancelled canceled dropped scrapped"
)
NEGATION_PHRASES = (" turned down ", " fell through ", " did not go through ", " bounced back ")
REVERSAL_PHRASES = (
    " no longer ",
    " changed her mind",
    " changed his mind",
    " changed their mind",
    " clawed back",
    " charged back",
    " taken back",
    " called off",
)
# Not done (yet): the future, the conditional, the hypothetical.
FUTURE = stem_set(
    "will would could might may should shall can must going plan planned plans intend intends eligible "
    "expected expects if once unless maybe possibly tomorrow later next soon tbd"
)
FUTURE_PHRASES = (
    " to be ",
    " needs to ",
    " need to ",
    " has to ",
    " have to ",
    " about to ",
    " yet to ",
    " not yet ",
)
# Talked about, not done: proposals, promises, requests (and approvals, which are decisions, not actions).
PROPOSALS = stem_set(
    "proposed propose offered offer suggested suggest recommended recommend promised promise requested "
    "request asked ask wants wanted want wish considering considered discussed mentioned pending awaiting "
    "waiting approved approve agreed agree authorized authorised accepted quoted explained inquired "
    "enquired tentative draft eligible tried attempted attempt approval"
)
DECISION_WORDS = stem_set("approved approval agreed authorized authorised accepted decided granted")
# Said alongside a proposal, these mean it was carried out: "requested and processed".
DONE = stem_set(
    "processed completed confirmed executed submitted filed placed posted went succeeded successful "
    "successfully finalized finalised done settled booked issued paid initiated created generated raised "
    "logged opened sent applied already actioned"
)
# An open question that reads as answered.
RESOLUTIONS = stem_set(
    "received answered resolved provided got arrived closed settled confirmed obtained supplied uploaded "
    "submitted sent found came shared done solved clarified verified checked sorted handled addressed "
    "replied responded delivered"
)
RESOLUTION_PHRASES = (" in hand ", " on file ", " came in ", " came through ", " has been answered ")
# An open question that reads as open: these override a resolution word ("awaiting confirmation").
OPEN_MARKERS = stem_set(
    "still outstanding pending awaiting waiting wait yet unresolved unanswered open tbd unknown unclear "
    "unconfirmed missing need needs expected chasing chase follow whether"
)
# Words that carry attitude or status, not content: left out of word share.
LIGHT = (
    frozenset(STOPWORDS)
    | NEGATIONS
    | FUTURE
    | PROPOSALS
    | OPEN_MARKERS
    | DECISION_WORDS
    | stem_set(
        "no without instead rather except other place only prefer prefers preferred like ok okay fine "
        "happy please customer user agent said say says stated state question decided decision granted "
        "allow go ahead be have get thing item items now again too very really longer who what which when "
        "where how why buyer mr ms mrs also any confirmed already"
    )
)
_CLAUSE_BREAK = re.compile(
    r"[;!?()\[\]\n]|\.(?!\d)|,(?!\d{3})|:\s|\s[-\u2013\u2014]\s|"
    r"\b(?:but|however|although|though|whereas|while|because|since|so|then|after|before|until|and|plus|also)\b"
)


@dataclass(frozen=True)
class Clause:
    """One clause of a text: its stems, each with its polarity (True = affirmed), and its flags."""

    text: str
    stems: tuple[str, ...]
    positive: tuple[bool, ...]
    negated: bool
    future: bool
    proposal: bool
    done: bool
    resolution: bool
    open_marker: bool
    numbers: frozenset[str]  # what is left of digits once money is read: times, dates, counts

    def reverses(self, *, allowed: Iterable[str] = ()) -> bool:
        """Does the clause say something was undone (apart from the words in `allowed`)?"""
        return bool(set(self.stems) & (REVERSALS - set(allowed))) or any(
            p in f" {self.text} " for p in REVERSAL_PHRASES
        )

    def has(self, wanted: Iterable[str]) -> bool:
        present = set(self.stems)
        return any(w in present for w in wanted)


def _clause(text: str) -> Clause:
    padded = f" {' '.join(WORD.findall(text.replace('_', ' ')))} "
    tokens = padded.split()
    stems = [stem(t) for t in tokens]
    positive = [True] * len(tokens)
    negated = any(s in NEGATIONS for s in stems) or any(p in padded for p in NEGATION_PHRASES)
    # "no replacement wanted": "no" and its kind negate what follows them.
    for cue in FORWARD_NEGATIONS:
        cue_tokens = cue.split()
        for i in range(len(tokens) - len(cue_tokens) + 1):
            if tokens[i : i + len(cue_tokens)] == cue_tokens:
                for j in range(i + len(cue_tokens), len(tokens)):
                    positive[j] = False
    # "prefers pickup over home delivery": what is preferred against reads as negated.
    if "prefer" in stems and "over" in tokens:
        for j in range(tokens.index("over") + 1, len(tokens)):
            positive[j] = False
    if negated:
        positive = [False] * len(tokens)
    has = set(stems)
    for i, token in enumerate(tokens):
        # "14 May" is a date, not a modal verb; a "pending order" is the order's status, not the action's.
        if token == "may" and any(t.isdigit() for t in tokens[max(i - 1, 0) : i + 2]):
            has.discard("may")
        if token == "pending" and tokens[i + 1 : i + 2] in (["order"], ["orders"], ["item"], ["items"]):
            has.discard(stem("pending"))
    return Clause(
        text=padded.strip(),
        stems=tuple(stems),
        positive=tuple(positive),
        negated=negated or (not all(positive) and tokens[:1] == ["no"]),
        future=bool(has & FUTURE) or any(p in padded for p in FUTURE_PHRASES),
        proposal=bool(has & PROPOSALS),
        done=bool(has & DONE),
        resolution=bool(has & RESOLUTIONS) or any(p in padded for p in RESOLUTION_PHRASES),
        open_marker=bool(has & OPEN_MARKERS) or "?" in text,
        numbers=frozenset(re.findall(r"\d+", padded)),
    )


def cue_only(clause: Clause) -> bool:
    """A clause of nothing but status words ("later reversed", "pending approval", "failed")."""
    return set(clause.stems) <= LIGHT | REVERSALS | RESOLUTIONS | DONE


def clauses(text: str) -> list[Clause]:
    """A text cut at its clause boundaries, each clause read for negation and modality on its own."""
    out = []
    start = 0
    for m in _CLAUSE_BREAK.finditer(text):
        piece = text[start : m.start()] + ("?" if m.group() == "?" else "")
        if piece.strip(" ?"):
            out.append(_clause(piece))
        start = m.end()
    if text[start:].strip():
        out.append(_clause(text[start:]))
    return out


def mentions_id(prepared: str, item_id: str | None) -> bool:
    if not item_id:
        return False
    return re.search(rf"(?<![\w-]){re.escape(item_id.casefold())}(?![\w-])", prepared) is not None
