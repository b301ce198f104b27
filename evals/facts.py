"""The facts a ticket must not lose, and where they are found: pure functions over plain data.

The expected facts come from the import document itself (its events), not from the desk's state,
so a fact the desk failed to record shows up as missing instead of silently not being checked.
They are the three categories the coverage check guards: irreversible actions, customer
constraints, and the questions still open at the end of the ticket.

Each fact is looked for in three places:
- the pinned state (structured: same tool, item and amount; same constraint or question text);
- the active summary, with the coverage check's own matchers (`core.coverage`), counted only
  for facts that were in the state when that summary was written;
- the assembled context the agent receives next, read back from the messages themselves (the
  pinned-state message, the summary message, and the kept turns), with the same matchers.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from core.context import SUMMARY_PREFIX
from core.coverage import action_covered, text_covered
from core.tokens import STATE_PREFIX, compact_json
from desk.importer import ImportTicket

Category = Literal["actions_taken", "customer_constraints", "open_questions"]
CATEGORIES: tuple[Category, ...] = ("actions_taken", "customer_constraints", "open_questions")


@dataclass(frozen=True)
class Fact:
    category: Category
    stored_at: int  # the turn whose events recorded it: it is in the pinned state from then on
    at_turn: int  # the turn it names
    text: str = ""
    tool: str = ""
    item: str = ""
    amount_cents: int = 0

    @property
    def label(self) -> str:
        if self.category != "actions_taken":
            return self.text
        amount = f" {self.amount_cents} cents" if self.amount_cents else ""
        return f"{self.tool}{amount} {self.item} at turn {self.at_turn}".replace("  ", " ")

    def as_action(self) -> dict[str, Any]:
        return {"tool": self.tool, "item": self.item, "amount_cents": self.amount_cents}


def expected_facts(doc: ImportTicket) -> list[Fact]:
    """Irreversible actions recorded, constraints stated, and questions opened but not resolved."""
    facts: list[Fact] = []
    open_questions: list[tuple[str, Fact]] = []  # (id, fact), ids as the desk numbers them: Q1, Q2...
    opened = 0
    for number, turn in enumerate(doc.turns, start=1):
        for event in turn.events:
            at_turn = event.at_turn or number
            if event.type == "action_taken" and not event.expect_refused and not event.reversible:
                facts.append(
                    Fact(
                        category="actions_taken",
                        stored_at=number,
                        at_turn=at_turn,
                        tool=event.tool or "",
                        item=event.item,
                        amount_cents=event.amount_cents,
                    )
                )
            elif event.type == "constraint_stated" and event.text:
                facts.append(Fact("customer_constraints", number, at_turn, text=event.text.strip()))
            elif event.type == "question_opened" and event.text:
                opened += 1
                open_questions.append(
                    (f"Q{opened}", Fact("open_questions", number, at_turn, text=event.text.strip()))
                )
            elif event.type == "question_resolved" and event.text:
                wanted = event.text.strip().casefold()
                for index, (qid, fact) in enumerate(open_questions):
                    if qid.casefold() == wanted or fact.text.casefold() == wanted:
                        del open_questions[index]
                        break
    return facts + [fact for _, fact in open_questions]


def _action_key(tool: str, item: str, amount_cents: int) -> tuple[str, str, int]:
    return (tool, item, int(amount_cents or 0))


def in_state(facts: list[Fact], state: dict[str, Any]) -> list[bool]:
    """Is each fact in the pinned state? Actions are matched one to one (a deliberate repeat is two)."""
    actions = Counter(
        _action_key(a.get("tool", ""), a.get("item", ""), a.get("amount_cents", 0))
        for a in state.get("actions_taken", [])
        if not a.get("reversed")
    )
    texts = {
        category: {entry.get("text", "").strip() for entry in state.get(category, [])}
        for category in ("customer_constraints", "open_questions")
    }
    found = []
    for fact in facts:
        if fact.category == "actions_taken":
            key = _action_key(fact.tool, fact.item, fact.amount_cents)
            ok = actions[key] > 0
            if ok:
                actions[key] -= 1
            found.append(ok)
        else:
            found.append(fact.text in texts[fact.category])
    return found


def covered(fact: Fact, entries: list[str]) -> bool:
    """The coverage check's matcher for the fact's category."""
    if fact.category == "actions_taken":
        return action_covered(fact.as_action(), entries)
    return text_covered(fact.text, entries)


ID_REFERENCE = re.compile(r"^\s*([ACQD]\d+)\b")


def resolve_references(entries: list[Any], category: str, state: dict[str, Any] | None) -> list[str]:
    """Summary entries with references to pinned items (`A1`, `C2`) replaced by the items they name.

    The engine's summaries refer to pinned items by id instead of restating them (the pinned state rides in
    the same request); a reference counts only where the state it points into is there to read.
    """
    by_id = {str(item.get("id")): item for item in (state or {}).get(category, [])}
    out = []
    for entry in entries:
        match = ID_REFERENCE.match(str(entry))
        item = by_id.get(match.group(1)) if match else None
        if item is None:
            out.append(str(entry))
        elif category == "actions_taken":
            out.append(compact_json(item))
        else:
            out.append(str(item.get("text", "")))
    return out


def in_summary(
    facts: list[Fact],
    summary: dict[str, Any] | None,
    written_at: int | None,
    state: dict[str, Any] | None = None,
) -> list[bool | None]:
    """Is each fact in the summary's field for it (references resolved against `state`)? None when there is
    no summary or the fact is newer."""
    out: list[bool | None] = []
    for fact in facts:
        if summary is None or written_at is None or fact.stored_at > written_at:
            out.append(None)
        else:
            out.append(
                covered(fact, resolve_references(summary.get(fact.category, []), fact.category, state))
            )
    return out


def context_entries(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What the agent reads, per category, taken back out of the request's messages.

    Each pinned-state item and each summary entry is its own entry (so that one action's tool and
    another's item never combine into a false match); the summary's narrative and every kept turn
    count for all three categories, since the agent reads them too.
    """
    entries: dict[str, list[str]] = {category: [] for category in CATEGORIES}
    state: dict[str, Any] | None = None
    for message in messages:
        content = str(message.get("content") or "")
        if message.get("role") == "system" and content.startswith(STATE_PREFIX):
            state = json.loads(content[len(STATE_PREFIX) :])
            entries["actions_taken"] += [compact_json(a) for a in state.get("actions_taken", [])]
            for category in ("customer_constraints", "open_questions"):
                entries[category] += [str(e.get("text", "")) for e in state.get(category, [])]
        elif message.get("role") == "system" and content.startswith(SUMMARY_PREFIX):
            summary = json.loads(content[len(SUMMARY_PREFIX) :])
            for category in CATEGORIES:
                entries[category] += resolve_references(summary.get(category, []), category, state)
                entries[category].append(str(summary.get("narrative", "")))
        elif message.get("role") != "system":
            for category in CATEGORIES:
                entries[category].append(content)
    return entries


def in_context(facts: list[Fact], messages: list[dict[str, Any]]) -> list[bool]:
    entries = context_entries(messages)
    return [covered(fact, entries[fact.category]) for fact in facts]


def without_pinned_state(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same request without the pinned-state message: what a prose-only desk would send."""
    return [
        m
        for m in messages
        if not (m.get("role") == "system" and str(m.get("content") or "").startswith(STATE_PREFIX))
    ]


@dataclass(frozen=True)
class FactCheck:
    fact: Fact
    state: bool
    summary: bool | None
    context: bool
    # In the context only because the pinned state rides in it: without that message, it is gone.
    only_in_state: bool = False
    # In every context it is due in with the pinned-state message taken out (the desk's summary and turns).
    context_without_state: bool = False
    # The summary-only baseline (evals/baseline.py): its rolling summary, and its context (no pinned state).
    baseline_summary: bool | None = None
    baseline_context: bool | None = None
    # The same for the baseline a real model wrote (`--baseline model`); None when it did not run.
    model_baseline_summary: bool | None = None
    model_baseline_context: bool | None = None
    # Established by the transcript itself (found in its turns, read whole): what any summary of the turns
    # alone could at best keep. A constraint from a tau brief the customer never put in words is not.
    in_transcript: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in asdict(self.fact).items() if v not in ("", None)},
            "label": self.fact.label,
            "in_state": self.state,
            "in_summary": self.summary,
            "in_context": self.context,
            "in_context_without_state": self.context_without_state,
            "only_in_pinned_state": self.only_in_state,
            "baseline_in_summary": self.baseline_summary,
            "baseline_in_context": self.baseline_context,
            "model_baseline_in_summary": self.model_baseline_summary,
            "model_baseline_in_context": self.model_baseline_context,
            "in_transcript": self.in_transcript,
        }


Contexts = list[tuple[int | None, list[dict[str, Any]]]]


def _due(facts: list[Fact], contexts: Contexts) -> list[list[int]]:
    """For each fact, the contexts assembled after it was stored: it must be in every one of them."""
    return [[k for k, (at, _) in enumerate(contexts) if at is None or fact.stored_at <= at] for fact in facts]


def _in_all(facts: list[Fact], contexts: Contexts) -> list[bool]:
    found = [in_context(facts, messages) for _, messages in contexts]
    return [all(found[k][index] for k in wanted) for index, wanted in enumerate(_due(facts, contexts))]


def check_facts(
    facts: list[Fact],
    *,
    state: dict[str, Any],
    summary: dict[str, Any] | None,
    summary_written_at: int | None,
    contexts: Contexts,
) -> list[FactCheck]:
    """Check each fact in the state, the summary, and every context it must appear in.

    `contexts` are (through_turn, messages): the request right after each applied compaction
    (through that turn) and the request at the end of the ticket (None). A fact must be in every
    one of them assembled after it was stored: losing it for a few turns is losing it.
    """
    context = _in_all(facts, contexts)
    without_state = _in_all(facts, [(at, without_pinned_state(messages)) for at, messages in contexts])
    return [
        FactCheck(
            fact=fact,
            state=s,
            summary=m,
            context=c,
            only_in_state=c and not w,
            context_without_state=w,
        )
        for fact, s, m, c, w in zip(
            facts,
            in_state(facts, state),
            in_summary(facts, summary, summary_written_at, state),
            context,
            without_state,
            strict=True,
        )
    ]


def check_baseline(
    checks: list[FactCheck],
    *,
    summary_text: str | None,
    summary_written_at: int | None,
    contexts: Contexts,
    transcript: list[dict[str, Any]],
    kind: str = "first-sentence",
) -> list[FactCheck]:
    """The same facts against the summary-only baseline: its latest rolling summary and its contexts.

    `transcript` is every turn as a message: a fact found there is one the transcript established.
    `kind` is which baseline (`first-sentence` or `model`, evals/baseline.py) the figures are for.
    """
    facts = [c.fact for c in checks]
    established = in_context(facts, transcript)
    in_text: list[bool | None] = [
        None
        if summary_text is None or summary_written_at is None or fact.stored_at > summary_written_at
        else covered(fact, [summary_text])
        for fact in facts
    ]
    context = _in_all(facts, contexts)
    if kind == "model":
        return [
            replace(check, model_baseline_summary=s, model_baseline_context=c, in_transcript=t)
            for check, s, c, t in zip(checks, in_text, context, established, strict=True)
        ]
    return [
        replace(check, baseline_summary=s, baseline_context=c, in_transcript=t)
        for check, s, c, t in zip(checks, in_text, context, established, strict=True)
    ]
