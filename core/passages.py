"""What a compaction dropped: the passages of the replaced turns that survive neither in the summary nor in
the pinned state.

Pure functions over plain data (turns, the summary, the pinned state), no Django, no model.

**Passages.** Only the conversation is read: customer and agent turns (tool calls and results are
represented by the pinned actions and the summary's `actions_taken`, and a JSON blob has no sentences). Each
turn's text is cut into sentences (at `.`, `!`, `?` and `;` followed by a space, and at line breaks), and each
sentence further at its clause joints (`: `, `, but `, `, and `, ` and should `, ...: see `_JOINT`), so that
"a $40 refund is on its way and should show within 3-5 business days" is two passages, the refund and the
delay. Every passage keeps its turn number and its character span in the turn's text (`text[start:end]`).

**Facts.** A passage's units are its content words (stems, as the coverage check reads them: stop words and
the words of attitude and status, `core.coverage.clauses.LIGHT`, left out), its money (read with its unit, in
cents: `core.coverage.money`), its ids (a token with a digit and three characters or more: `SU-87310`,
`rf_5521`, `PL77310045`, compared without case or separators) and its other numbers (`3-5 days`). A passage
without a content word, an amount or an id other than the ticket's is small talk ("Thanks!", "Let me check.",
"Please do.", a list's "1.") and is never flagged; courtesy words (`TALK`: thanks, sorry, great, help, ...)
are not content words.

**Keepers.** Each summary entry (the four lists) and each sentence of its narrative, and each pinned item:
a constraint, question or decision by its text, an action by its tool (with the words of its verb family,
`core.coverage.matching.VERB_FAMILIES`: `issue_refund` keeps "refunded" and "credited"), its item and its
amount. The ticket's own id and order id are known to every keeper (the pinned state carries them).

**The rule.** A passage survives in a keeper when

1. every amount of money it states is one the keeper names (a different amount is not the same fact), and
2. at least half of its units are found in the keeper (a unit is found when its stem, id, number or amount
   is among the keeper's), or, when the passage states money and the keeper names that amount, at least
   one of its content words is found as well ("I can refund $40 for the scratched leg" survives in a pinned
   `issue_refund` of 4000 cents, "$40 is fair" too, as the amount is its only fact besides one word).

A passage that survives in no keeper is dropped. Words are compared as the coverage check compares them:
casefolded, NFKC (a U+2011 hyphen is a hyphen), zero-width characters gone, plurals and tenses stemmed
("garden-tables refunded", its hyphen a U+2011, meets `issue_refund garden-table`).

**Kinds.** Each dropped passage carries a guess of the correction that would pin it: money or a verb of the
refund, charge or credit families is a missed action; a question mark is an open question; "won't", "don't",
"must", "only", "never" (and their kin) a customer constraint; anything else a decision. The supervisor can
change it before saving.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core.coverage.clauses import LIGHT, clauses, stem_set
from core.coverage.matching import VERB_FAMILIES
from core.coverage.money import amounts_in
from core.coverage.words import normalize_name, prepare, stem, words

# The correction a dropped passage would be pinned as (the StateOp values).
PinKind = Literal["action_added", "question_opened", "constraint_stated", "decision_made"]
PIN_KINDS: tuple[PinKind, ...] = ("action_added", "question_opened", "constraint_stated", "decision_made")

CONVERSATION_ROLES = frozenset({"customer", "agent", "user", "assistant"})
SHARE = 0.5  # the share of a passage's units a keeper must carry

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
# Clause joints inside a sentence: where a second fact usually starts.
_JOINT = re.compile(
    r":\s+|,\s+(?=(?:but|and|so|although|though|which|because|since|while)\b)|"
    r"\s+(?=(?:and|but)\s+(?:should|will|would|can|could|it|it's|its|they|we|i|you|the)\b)",
    re.IGNORECASE,
)
_ID = re.compile(r"(?<![\w-])#?[\w][\w\-\u2010\u2011/]*\d[\w\-\u2010\u2011/]*")
# Courtesy and turn-taking: words that carry no fact of the ticket ("Thanks!", "Let me check.").
TALK = stem_set(
    "thank thanks hi hello hey sorry yes yeah yep sure great perfect good news honestly pretty bye goodbye "
    "welcome course let check moment minute sec second look help glad appreciate happy day great nice "
    "problem worry hope assist assistance feel free reach further helpful correct right exactly alright "
    "today"
)
_MONEY_VERBS = VERB_FAMILIES["refund"] | VERB_FAMILIES["charge"] | {stem("credit"), stem("credited")}
_CONSTRAINT_WORDS = re.compile(
    r"\b(?:won't|wont|will not|don't|dont|do not|doesn't|does not|must|mustn't|only|never|cannot|can't|"
    r"no longer|not going to|refuse|rather not)\b"
)


@dataclass(frozen=True)
class Facts:
    """What a text says, as the rule compares it: content stems, money in cents, ids, other numbers."""

    stems: frozenset[str]
    money: frozenset[int]  # stated amounts (with a unit)
    money_any: frozenset[int]  # stated and bare readings (a keeper's `4000` names $40 and $4000)
    ids: frozenset[str]
    numbers: frozenset[str]

    @property
    def empty(self) -> bool:
        return not (self.stems or self.money or self.ids or self.numbers)

    @property
    def units(self) -> int:
        return len(self.stems) + len(self.money) + len(self.ids) + len(self.numbers)


@dataclass(frozen=True)
class Keeper:
    """Where a fact can survive: a summary entry or sentence, or a pinned item."""

    where: Literal["summary", "pinned state"]
    label: str  # "summary.narrative", "C1", ...
    facts: Facts


@dataclass(frozen=True)
class Passage:
    turn: int | None
    index: int  # its place among the passages of its turn
    start: int
    end: int  # the span in the turn's text: text[start:end]
    text: str
    small_talk: bool
    dropped: bool
    kept_by: str  # the keeper's label when it survived ("summary.narrative", "A1"), else ""
    kind: PinKind | None  # the guessed correction, for a dropped passage
    amount_cents: int | None  # the one amount it states, for a missed action's form
    tool: str  # "issue_refund" when it speaks of a refund, for a missed action's form


@dataclass(frozen=True)
class TurnPassages:
    turn: int | None
    role: str
    text: str
    passages: list[Passage]

    @property
    def dropped(self) -> list[Passage]:
        return [p for p in self.passages if p.dropped]

    def pieces(self) -> list[tuple[str, Passage | None]]:
        """The turn's text cut into runs: each dropped passage on its own (with it), the rest between."""
        out: list[tuple[str, Passage | None]] = []
        at = 0
        for p in self.dropped:
            if p.start > at:
                out.append((self.text[at : p.start], None))
            out.append((self.text[p.start : p.end], p))
            at = p.end
        if at < len(self.text):
            out.append((self.text[at:], None))
        return out


# --- reading ---------------------------------------------------------------------------------------


def _id_key(token: str) -> str:
    return re.sub(r"[\W_]+", "", prepare(token))


def facts_of(text: str, *, extra_stems: Iterable[str] = ()) -> Facts:
    """The units of a text: content stems, money, ids and the numbers left once those are read."""
    prepared = prepare(text)
    ids = {_id_key(m.group()) for m in _ID.finditer(prepared) if re.search(r"[^\W\d_]", m.group())}
    ids = {i for i in ids if len(i) >= 3}
    without_ids = _ID.sub(lambda m: " " if re.search(r"[^\W\d_]", m.group()) else m.group(), prepared)
    amounts, rest = amounts_in(without_ids)
    parts = clauses(rest)
    stems = {
        s
        for c in parts
        for s in c.stems
        if s and s not in LIGHT and s not in TALK and not s.isdigit() and len(s) > 1
    }
    # Bare numbers are read as money both ways ({n, 100n}); the number itself is a unit as well.
    numbers = {n for c in parts for n in c.numbers} | {
        str(b) for b in amounts.bare if b * 100 in amounts.bare
    }
    return Facts(
        stems=frozenset(stems | set(extra_stems)),
        money=amounts.stated,
        money_any=amounts.stated | amounts.bare,
        ids=frozenset(ids),
        numbers=frozenset(numbers),
    )


def split_passages(text: str) -> list[tuple[int, int]]:
    """The spans of a text's passages: sentences, cut again at their clause joints; blank ones left out."""
    spans: list[tuple[int, int]] = []
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(text)]
    ends = [m.start() for m in _SENTENCE_END.finditer(text)] + [len(text)]
    for s_start, s_end in zip(starts, ends, strict=True):
        sentence = text[s_start:s_end]
        cuts = [0] + [m.end() for m in _JOINT.finditer(sentence)]
        stops = [m.start() for m in _JOINT.finditer(sentence)] + [len(sentence)]
        for c_start, c_stop in zip(cuts, stops, strict=True):
            piece = sentence[c_start:c_stop]
            lead = len(piece) - len(piece.lstrip())
            trail = len(piece.rstrip())
            if piece.strip():
                spans.append((s_start + c_start + lead, s_start + c_start + trail))
    return spans


def _action_keeper(action: Mapping[str, Any]) -> Keeper:
    tool = str(action.get("tool") or "")
    item = str(action.get("item") or "")
    tool_stems = [stem(w) for w in normalize_name(tool).split()]
    family = next((f for f, ws in VERB_FAMILIES.items() if set(tool_stems) & ws), None)
    extra = set(tool_stems) | (VERB_FAMILIES[family] if family else set())
    amount = int(action.get("amount_cents") or 0)
    base = facts_of(f"{normalize_name(tool)} {item}", extra_stems=extra)
    money = frozenset({amount}) if amount else frozenset()
    numbers = base.numbers | ({str(amount), f"{amount // 100}"} if amount else set())
    return Keeper(
        where="pinned state",
        label=str(action.get("id") or tool),
        facts=Facts(base.stems, money, money, base.ids, frozenset(numbers)),
    )


def keepers(summary: Mapping[str, Any] | None, states: Sequence[Mapping[str, Any]]) -> list[Keeper]:
    """Every place a passage can survive: the summary's entries and narrative sentences, and the items of
    each pinned state given (the one at the compaction and the one now, say)."""
    out: list[Keeper] = []
    summary = summary or {}
    for field in ("actions_taken", "customer_constraints", "open_questions", "decisions"):
        for index, entry in enumerate(summary.get(field) or []):
            out.append(Keeper("summary", f"summary.{field}[{index}]", facts_of(str(entry))))
    narrative = str(summary.get("narrative") or "")
    for start, end in split_passages(narrative):
        out.append(Keeper("summary", "summary.narrative", facts_of(narrative[start:end])))
    for state in states:
        for action in state.get("actions_taken") or []:
            out.append(_action_keeper(action))
        for field in ("customer_constraints", "open_questions", "decisions"):
            for item in state.get(field) or []:
                label = str(item.get("id") or field)
                out.append(Keeper("pinned state", label, facts_of(str(item.get("text") or ""))))
    return out


def _known_ids(states: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    known = set()
    for state in states:
        for key in ("ticket", "order"):
            if state.get(key):
                known.add(_id_key(str(state[key])))
    return frozenset(known)


def survives(facts: Facts, keeper: Facts, *, known_ids: frozenset[str] = frozenset()) -> bool:
    """The rule (see the module's docstring): money must agree, then half of the units must be found."""
    if facts.money and not facts.money <= keeper.money_any:
        return False
    found = (
        len(facts.stems & keeper.stems)
        + len(facts.money & keeper.money_any)
        + len(facts.ids & (keeper.ids | known_ids))
        + len(facts.numbers & keeper.numbers)
    )
    if facts.units and found / facts.units >= SHARE:
        return True
    return bool(facts.money) and bool(facts.stems & keeper.stems)


def guess_kind(text: str, facts: Facts) -> PinKind:
    """Which correction would pin this passage (the supervisor may choose another)."""
    if facts.money or facts.stems & _MONEY_VERBS:
        return "action_added"
    if "?" in text:
        return "question_opened"
    if _CONSTRAINT_WORDS.search(prepare(text).replace("\u2019", "'")):
        return "constraint_stated"
    return "decision_made"


def _passage(
    turn: int | None, index: int, text: str, span: tuple[int, int], kept: list[Keeper], known: frozenset[str]
) -> Passage:
    piece = text[span[0] : span[1]]
    facts = facts_of(piece)
    # An id the ticket itself carries (its order) is known everywhere; a passage of nothing else is talk.
    # Numbers alone ("1." of a list, "2 of them") are no fact without a word or an amount to say what of.
    small_talk = not facts.stems and not facts.money and facts.ids <= known
    keeper = None
    if not small_talk:
        keeper = next((k for k in kept if survives(facts, k.facts, known_ids=known)), None)
    dropped = not small_talk and keeper is None
    refund_words = {stem(w) for w in words(piece)} & VERB_FAMILIES["refund"]
    return Passage(
        turn=turn,
        index=index,
        start=span[0],
        end=span[1],
        text=piece,
        small_talk=small_talk,
        dropped=dropped,
        kept_by=keeper.label if keeper else "",
        kind=guess_kind(piece, facts) if dropped else None,
        amount_cents=next(iter(facts.money)) if len(facts.money) == 1 else None,
        tool="issue_refund" if refund_words else "",
    )


def dropped_passages(
    turns: Iterable[Mapping[str, Any]],
    summary: Mapping[str, Any] | None,
    states: Sequence[Mapping[str, Any]],
) -> list[TurnPassages]:
    """The conversation turns among `turns` (each `{"turn", "role", "content"}`), cut into passages, each
    marked dropped when it survives neither in `summary` nor in any of the pinned `states`."""
    kept = keepers(summary, states)
    known = _known_ids(states)
    out = []
    for turn in turns:
        role = str(turn.get("role") or "")
        if role not in CONVERSATION_ROLES:
            continue
        text = str(turn.get("content") or "")
        number = turn.get("turn")
        passages = [
            _passage(number, i, text, span, kept, known) for i, span in enumerate(split_passages(text))
        ]
        out.append(TurnPassages(turn=number, role=role, text=text, passages=passages))
    return out
