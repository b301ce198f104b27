"""The coverage check: does the summary carry every action, constraint, open question and decision of the
pinned state?

Pure functions over plain data, no model. Matching is tolerant of wording and strict about substance:

- Money is read with its unit ($40, 40 dollars, 4000 cents, USD 40.00, 40,00 EUR, forty dollars) and
  compared in cents; when an action has an amount, the entry must state it, and a different amount is a miss.
- An action is found through its tool's verb family (issue_refund ~ refunded / refund issued / credited
  back; cancel_* ~ cancelled; book_return ~ returned / return booked; exchange_* ~ exchanged / swapped) and
  its item's words. "The table" is accepted for `garden-table` (the item's head noun) because the verb and
  the amount must match too; "refunded $40" with no item at all is a miss.
- Negation and modality are scoped to the clause (split at ; . , parentheses and but/because/...): "the
  refund was not issued", "a refund was proposed", "will refund", "customer asked for a refund" do not
  cover a refund that was issued.
- A constraint, question or decision is found by its content words, each with its polarity in its clause:
  "no refund wanted, replacement ok" does not cover "no replacement wanted"; "refund denied" does not
  cover "approved a refund". An open question must still read as open ("photo received" is a miss), and a
  decision must read as made ("refund proposed" is a miss).
- An entry that names a pinned item by its id as a whole word (`A1`, `C2`, `Q1`, `D3`) stands for it,
  with the same checks on what the entry says about it.

docs/coverage.md says what this cannot do and how well it does on the labelled benchmark.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from core.identity import SEPARATOR as IDENTITY_SEPARATOR
from core.identity import normalize_name as identity_name

# --- names -------------------------------------------------------------------------------------------


def normalize_name(name: str) -> str:
    """A tool or item name as words: the desk's one identity (`tickets.identity`), so the guard and the check
    agree on what "the same item" is, with its separator read as a space."""
    return identity_name(name).replace(IDENTITY_SEPARATOR, " ")


# --- words -------------------------------------------------------------------------------------------

STOPWORDS = {
    "a", "an", "the", "of", "to", "for", "and", "or", "in", "on", "at", "is", "are", "was", "were", "be",
    "been", "it", "its", "that", "this", "these", "those", "with", "by", "from", "as", "i", "my", "me",
    "we", "us", "you", "your", "they", "them", "their", "he", "she", "his", "her", "has", "have", "had",
    "any", "some", "if", "so", "do", "does", "did", "there", "here", "than", "then", "about", "into",
    "onto", "per", "via", "also", "just", "all", "both", "each", "one", "s",
}  # fmt: skip
_IRREGULAR = {
    "sent": "send", "paid": "pay", "held": "hold", "gave": "give", "given": "give", "got": "get",
    "gotten": "get", "kept": "keep", "made": "make", "told": "tell", "wrote": "write", "written": "write",
    "bought": "buy", "sold": "sell", "chose": "choose", "chosen": "choose", "went": "go", "done": "do",
    "did": "do", "was": "be", "were": "be", "been": "be", "is": "be", "are": "be", "has": "have",
    "had": "have", "denied": "deny", "denies": "deny", "modified": "modify", "modifies": "modify",
    "notified": "notify", "replies": "reply", "replied": "reply", "applied": "apply", "pics": "photo",
    "pic": "photo", "refunds": "refund", "items": "item", "goods": "good",
}  # fmt: skip
_SUFFIXES = ("ations", "ation", "ements", "ement", "ments", "ment", "ings", "ing", "ies", "ed", "es", "s")
# Words that mean the same thing to the check (written as words, compared as stems).
_SYNONYM_WORDS = {
    "call": "phone", "called": "phone", "calls": "phone", "telephone": "phone", "rang": "phone",
    "ring": "phone", "picture": "photo", "image": "photo", "photograph": "photo", "pic": "photo",
    "package": "parcel", "shipment": "parcel", "buyer": "customer", "client": "customer",
    "merchant": "seller", "vendor": "seller", "reimbursed": "refund", "reimbursement": "refund",
    "sms": "text", "purchase": "buy", "purchased": "buy", "cancellation": "cancel", "delivery": "deliver",
    "e-mail": "email", "mail": "email",
}  # fmt: skip


def stem(word: str) -> str:
    """A crude stem, good enough to meet "refunded", "refunds" and "refund" (and "tables" and "table")."""
    base = _raw_stem(word)
    return _SYNONYMS.get(base, base)


def _raw_stem(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.isdigit():
        return word
    base = word
    for suffix in _SUFFIXES:
        if base.endswith(suffix) and len(base) - len(suffix) >= 3:
            if suffix == "s" and base.endswith(("ss", "us", "is")):
                break
            base = base[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    if base.endswith("e") and len(base) > 3:
        base = base[:-1]
    if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "aeiou":
        base = base[:-1]
    return base


_SYNONYMS = {_raw_stem(k): _raw_stem(v) for k, v in _SYNONYM_WORDS.items()}


# Free text (not names): zero-width characters and the soft hyphen vanish before words are read.
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)


def _prepare(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH).casefold()
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    text = re.sub(r"\bwon't\b", "will not", text)
    text = re.sub(r"\bcan'?t\b|\bcannot\b", "can not", text)
    text = re.sub(r"\b(\w+)n't\b", r"\1 not", text)
    return re.sub(r"\b(do|does|did|is|was|were|are|has|have|had|could|would|should|wo)nt\b", r"\1 not", text)


_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The words of a text, casefolded, with `-` and `_` as separators."""
    return _WORD.findall(_prepare(text).replace("_", " ").replace("-", " "))


# --- money -------------------------------------------------------------------------------------------

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d{1,2})?|\d+(?:[.,]\d{1,2})?"
_CURRENCY = r"us\$|\$|€|£|usd|eur|gbp|cad|aud"
_MONEY_PATTERNS = (
    # $40, USD 40.00, € 12,50
    (re.compile(rf"(?<![\w#/])(?:{_CURRENCY})\s?(?P<num>{_NUM})(?![\w%/])"), 100),
    # 4000 cents, 4000¢
    (re.compile(rf"(?<![\w#/.,$€£-])(?P<num>{_NUM})\s?(?:cents?|cts?|¢)(?!\w)"), 1),
    # 40 dollars, 40.00 EUR, 40$
    (
        re.compile(
            rf"(?<![\w#/.,$€£-])(?P<num>{_NUM})\s?(?:\$|€|£|usd|eur|gbp|cad|aud|dollars?|bucks|euros?|pounds?)(?!\w)"
        ),
        100,
    ),
)
_UNITS = {
    w: n
    for n, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
}
_TENS = {
    w: 10 * n
    for n, w in enumerate(
        ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    )
    if n >= 2
}
_WORD_NUMBER = (
    rf"(?:(?:a|one|{'|'.join(_UNITS)})\s+hundred(?:\s+(?:and\s+)?)?)?"
    rf"(?:(?:{'|'.join(_TENS)})(?:[\s-](?:{'|'.join(list(_UNITS)[1:10])}))?|{'|'.join(_UNITS)})?"
)
_WORD_MONEY = re.compile(rf"\b(?P<num>{_WORD_NUMBER})\s+(?P<unit>dollars?|bucks|euros?|pounds?|cents?)\b")
# A bare number, which may be cents (`4000`) or whole money (`40`), unless it is a turn, a count or a time.
_BARE_NUMBER = re.compile(r"(?<![\w#/.,:$€£-])(?P<num>\d+(?:\.\d{2})?)(?![\w%/:.,-]|\.\d|,\d)")
_NOT_MONEY_BEFORE = re.compile(
    r"(?<![a-z])(?:turns?|steps?|#|order|orders|no\.?|number|item|items|qty|x|id|days?|weeks?|within|jan|feb|mar|apr|may|"
    r"jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|august|september|october|"
    r"november|december|at|by|before|after|until|room|flight|seat|gate|message|call|version|v)\s*$"
)
_NOT_MONEY_AFTER = re.compile(
    r"^\s*(?:days?|weeks?|months?|years?|hours?|hrs?|minutes?|mins?|items?|units?|pcs|pieces?|x|times|"
    r"am|pm|kg|g|lbs?|cm|mm|m|inch|inches|st|nd|rd|th|of\s+them|boxes|parcels|packages|orders|"
    r"jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|august|"
    r"september|october|november|december)(?![a-z])|^%"
)


def _number(text: str) -> float | None:
    if re.fullmatch(r"\d+,\d{1,2}", text):  # 12,50 (a decimal comma)
        text = text.replace(",", ".")
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _word_number(text: str) -> int | None:
    total, value = 0, 0
    parts = re.split(r"[\s-]+", text.strip())
    for part in parts:
        if part == "and":
            continue
        if part in ("a", "one") and parts[-1:] != [part] and "hundred" in parts:
            value = 1
        elif part in _UNITS:
            value += _UNITS[part]
        elif part in _TENS:
            value += _TENS[part]
        elif part == "hundred":
            total, value = total + max(value, 1) * 100, 0
        else:
            return None
    return total + value if parts and parts != [""] else None


@dataclass(frozen=True)
class Amounts:
    """Money named in a text, in cents: `stated` carries a unit (or two decimals), `bare` are numbers that
    could be cents or whole money (both readings kept)."""

    stated: frozenset[int]
    bare: frozenset[int]

    @property
    def any(self) -> bool:
        return bool(self.stated or self.bare)

    def names(self, cents: int) -> bool:
        return cents in self.stated or cents in self.bare


def amounts_in(text: str) -> tuple[Amounts, str]:
    """The money a text names, and the text with that money blanked out (so its digits are not words)."""
    prepared = _prepare(text)
    stated: set[int] = set()
    spans: list[tuple[int, int]] = []

    def taken(start: int, end: int) -> bool:
        return any(s < end and start < e for s, e in spans)

    for pattern, scale in _MONEY_PATTERNS:
        for m in pattern.finditer(prepared):
            if taken(m.start(), m.end()):
                continue
            number = _number(m.group("num"))
            if number is not None:
                stated.add(round(number * scale))
                spans.append((m.start(), m.end()))
    for m in _WORD_MONEY.finditer(prepared):
        if not m.group("num").strip() or taken(m.start(), m.end()):
            continue
        value = _word_number(m.group("num"))
        if value is not None:
            stated.add(value if m.group("unit").startswith("cent") else value * 100)
            spans.append((m.start(), m.end()))
    bare: set[int] = set()
    for m in _BARE_NUMBER.finditer(prepared):
        if taken(m.start(), m.end()):
            continue
        if _NOT_MONEY_BEFORE.search(prepared[: m.start()]) or _NOT_MONEY_AFTER.match(prepared[m.end() :]):
            continue
        raw = m.group("num")
        if "." in raw:
            stated.add(round(float(raw) * 100))
        else:
            bare.update({int(raw), int(raw) * 100})
        spans.append((m.start(), m.end()))
    for start, end in sorted(spans, reverse=True):
        prepared = prepared[:start] + " " + prepared[end:]
    return Amounts(frozenset(stated), frozenset(bare)), prepared


# --- clauses -----------------------------------------------------------------------------------------


def _stems(text: str) -> frozenset[str]:
    """Cue words are written as words and compared as stems."""
    return frozenset(stem(w) for w in text.split())


# Negation of the whole clause: "the refund was not issued", "replacement declined".
NEGATIONS = _stems(
    "not never none nothing neither nor denied deny declined decline refused refuse rejected reject "
    "failed fail unable unsuccessful nobody dont doesnt didnt wont cant against errored bounced"
)
# Negation of what follows in the clause: "refund issued with no return", "refund instead of a replacement".
FORWARD_NEGATIONS = ("no", "without", "instead of", "rather than", "except", "other than", "in place of")
# What undoes a decision, a constraint, or an action that was not reversed.
REVERSALS = _stems(
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
FUTURE = _stems(
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
PROPOSALS = _stems(
    "proposed propose offered offer suggested suggest recommended recommend promised promise requested "
    "request asked ask wants wanted want wish considering considered discussed mentioned pending awaiting "
    "waiting approved approve agreed agree authorized authorised accepted quoted explained inquired "
    "enquired tentative draft eligible tried attempted attempt approval"
)
DECISION_WORDS = _stems("approved approval agreed authorized authorised accepted decided granted")
# Said alongside a proposal, these mean it was carried out: "requested and processed".
DONE = _stems(
    "processed completed confirmed executed submitted filed placed posted went succeeded successful "
    "successfully finalized finalised done settled booked issued paid initiated created generated raised "
    "logged opened sent applied already actioned"
)
# An open question that reads as answered.
RESOLUTIONS = _stems(
    "received answered resolved provided got arrived closed settled confirmed obtained supplied uploaded "
    "submitted sent found came shared done solved clarified verified checked sorted handled addressed "
    "replied responded delivered"
)
RESOLUTION_PHRASES = (" in hand ", " on file ", " came in ", " came through ", " has been answered ")
# An open question that reads as open: these override a resolution word ("awaiting confirmation").
OPEN_MARKERS = _stems(
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
    | _stems(
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
    padded = f" {' '.join(_WORD.findall(text.replace('_', ' ')))} "
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


def _cue_only(clause: Clause) -> bool:
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


def _mentions_id(prepared: str, item_id: str | None) -> bool:
    if not item_id:
        return False
    return re.search(rf"(?<![\w-]){re.escape(item_id.casefold())}(?![\w-])", prepared) is not None


# --- matching ----------------------------------------------------------------------------------------


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
    "refund": _stems("refund refunded reimbursed credited repaid repay"),
    "cancel": _stems("cancel cancelled canceled cancellation"),
    "return": _stems("return returned rma"),
    "exchange": _stems("exchange exchanged swap swapped"),
    "replace": _stems("replace replaced replacement reshipped resent"),
    "modify": _stems(
        "modify modified modification changed change updated update amended edited switched corrected altered"
    ),
    "hold": _stems("hold held paused intercepted stopped"),
    "message": _stems(
        "message messaged contacted emailed wrote notified informed told pinged reached escalated"
    ),
    "send": _stems("send sent issued gave given mailed emailed"),
    "book": _stems("book booked reserved scheduled arranged"),
    "order": _stems("order ordered bought reordered"),
    "escalate": _stems("escalate escalated transferred handed"),
    "charge": _stems("charge charged billed"),
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
_WEAK_VERBS = _stems("issue book send order make create process submit do run get call")
# Tool-name words that are neither the verb nor a distinguishing object.
GENERIC_TOOL_WORDS = _stems(
    "pending delivered order orders item items user tool full partial issue process make create submit "
    "get do run call new request customer buyer record parcel package shipment"
)
_OBJECT_SYNONYMS = {
    stem(key): _stems(ws)
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
        and normalize_name(str(action.get("item") or "")) == normalize_name(str(other.get("item") or ""))
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
    by_id = _mentions_id(rest, action.get("id"))

    if amount and found.any and not found.names(amount):
        return Match(False, f"wrong amount (the state says {amount} cents)", 5)
    verb_clauses = [(i, _verb_positions(c, tool)) for i, c in enumerate(parts)]
    verb_clauses = [(i, v) for i, v in verb_clauses if v]
    if by_id:
        verb_clauses += [(i, []) for i, c in enumerate(parts) if _mentions_id(c.text, action.get("id"))]
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
        if _cue_only(c) and c.stems[:1] != ("as",) and not any(s in tool.verbs for s in c.stems):
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
    by_id = _mentions_id(rest, item_id)
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
    relevant = [c for c in parts if set(c.stems) & set(hits)] + [c for c in parts if _cue_only(c)]
    if by_id:
        relevant = [c for c in parts if _mentions_id(c.text, item_id)] + relevant
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


# --- the report --------------------------------------------------------------------------------------


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
            else:
                missing.append({**ref, "why": match.why})
    return CoverageReport(covered=covered, missing=missing)
