"""Reads of the assembled context: sums of stored counts, a constant number of queries."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import Any, Protocol

from django.db import DEFAULT_DB_ALIAS
from django.db.models import JSONField, OuterRef, QuerySet, Subquery
from django.db.models.functions import JSONObject

from compaction.models import CompactionEvent
from core.context import AssembledContext, TokenBreakdown, TurnView
from core.state import StateItems, agent_state, model_state, replay_changes
from core.state_text import MODEL_ACTIONS, stored_document
from core.tokens import REPLY_PRIMING_TOKENS
from core.vocabulary import CompactionStatus
from tickets.compiled_reads import CompiledRead
from tickets.models import (
    SERVED_COLUMNS,
    SERVED_TAIL,
    PinnedState,
    StateChange,
    Ticket,
    Turn,
    served_action_texts,
)
from tickets.served_state import ACTION_TEXTS


@dataclass(frozen=True)
class ContextFigures:
    tokens: TokenBreakdown
    first_active_turn: int
    threshold_tokens: int
    token_budget: int

    @property
    def total(self) -> int:
        return self.tokens.total


def pending_compaction(ticket: Ticket) -> CompactionEvent | None:
    """The ticket's claimed compaction that has not finished yet (at most one)."""
    return CompactionEvent.objects.pending().filter(ticket=ticket).first()


def active_compaction(ticket: Ticket, through_turn: int | None = None) -> CompactionEvent | None:
    """The compaction whose summary is in the request now (or right after `through_turn`)."""
    events = CompactionEvent.objects.filter(ticket=ticket).applied()
    if through_turn is not None:
        events = events.filter(at_turn__lte=through_turn)
    return (
        events.order_by("-number")
        .only("number", "summary", "summary_tokens", "first_replaced_turn", "last_replaced_turn")
        .first()
    )


@dataclass(frozen=True)
class ActiveSummary:
    """The summary in the request: what it says, what it costs, the turns it replaced."""

    summary: dict[str, Any] | None
    summary_tokens: int
    first_replaced_turn: int | None
    last_replaced_turn: int | None

    @property
    def first_active_turn(self) -> int:
        return (self.last_replaced_turn or 0) + 1


@cache
def context_tickets() -> QuerySet[Ticket]:
    """All tickets with_active_summary(), built once per process: filtering it clones the annotated query
    instead of resolving its subqueries again on every context read.

    Only the columns the context is made of are read (each column costs its conversion on every read): the
    ticket's prompt and identifiers, the class's budget, the state's version, tokens and the model's served
    texts (tickets.served_state); not its items nor its stored document. A state with no served text of its
    version is built from its items (read then: one more query, and its class's catalog: one more)."""
    return (
        with_active_summary(Ticket.objects.order_by())
        .only("pinned_state__ticket_id", *_CONTEXT_COLUMNS)
        .annotate(**_MODEL_ACTION_TEXTS)
    )


# The agent's context read, compiled once per process (it runs on every turn): the ticket by its id with
# its class, state, active summary and pending claim; then the turns from a number on.
CONTEXT_TICKET = CompiledRead(lambda ticket_id: context_tickets().filter(ticket_id=ticket_id)[:2], str)
_TURN_FIELDS = ("number", "role", "content", "tool", "args", "tool_call_id", "boundary", "tokens")
TURNS_FROM = CompiledRead(
    lambda ticket_pk, first: (
        Turn.objects.filter(ticket_id=ticket_pk, number__gte=first)
        .order_by("number")
        .values_list(*_TURN_FIELDS)
    ),
    int,
    int,
)


# The model's lists of served texts kept on the state row, in the document's order; its actions' texts are
# joined from their rows by the read (annotated as served_model_actions, after them).
_MODEL_LISTS = tuple(SERVED_COLUMNS)
_MODEL_ACTION_TEXTS = served_action_texts("pinned_state__pk", model=True)
# What the context is made of: the ticket's prompt and identifiers, the class's budget, the state's version, tokens
# and the model's served texts (the order served_context unpacks them in).
_CONTEXT_COLUMNS = (
    "ticket_id",
    "order_id",
    "seller_type",
    "ticket_class_id",
    "system_prompt",
    "system_prompt_tokens",
    "ticket_class__token_budget",
    "ticket_class__compaction_threshold",
    "pinned_state__version",
    "pinned_state__tokens",
    "pinned_state__served_version",
    *(f"pinned_state__{column}" for column in SERVED_COLUMNS.values()),
    f"pinned_state__{SERVED_TAIL}",
)


def with_active_summary(tickets: QuerySet[Ticket]) -> QuerySet[Ticket]:
    """Tickets with their class, pinned state, active summary and pending claim, all in one query: each of
    the two events is one subquery returning its fields as a JSON object (two subqueries to plan, not eight)."""
    newest = CompactionEvent.objects.filter(ticket=OuterRef("pk")).applied().order_by("-number")
    claim = CompactionEvent.objects.pending().filter(ticket=OuterRef("pk")).order_by("-number")
    active = JSONObject(
        summary="summary", tokens="summary_tokens", first="first_replaced_turn", last="last_replaced_turn"
    )
    pending = JSONObject(number="number", since="created_at", status="status", upto="upto_turn")
    return tickets.select_related("ticket_class", "pinned_state").annotate(
        active_event=Subquery(newest.values(fields=active)[:1], output_field=JSONField()),
        pending_event=Subquery(claim.values(fields=pending)[:1], output_field=JSONField()),
    )


def _json(value: Any) -> Any:
    # SQLite's JSON_OBJECT nests a JSON column's text as a string; PostgreSQL's nests the value itself.
    return json.loads(value) if isinstance(value, str) else value


def pending_claim(ticket: Ticket) -> dict[str, Any] | None:
    """The claimed compaction that has not finished, as the context shows it: from the ticket's annotation
    when with_active_summary() loaded it, else one query."""
    if hasattr(ticket, "pending_event"):
        found = _json(ticket.pending_event)
        if not found:
            return None
        since = datetime.fromisoformat(found["since"])
        number, status, upto = found["number"], found["status"], found["upto"]
        since = since if since.tzinfo else since.replace(tzinfo=UTC)  # SQLite keeps UTC without the offset
    else:
        claim = pending_compaction(ticket)
        if claim is None:
            return None
        number, since, status, upto = claim.number, claim.created_at, claim.status, claim.upto_turn
    return {
        "number": number,
        "since": since.isoformat(),
        "running": status == CompactionStatus.RUNNING,
        "upto_turn": upto,
    }


def active_summary(ticket: Ticket, through_turn: int | None = None) -> ActiveSummary | None:
    """The summary in the request now (or right after `through_turn`): from the ticket's annotations when
    with_active_summary() loaded it, else one query."""
    if through_turn is None and hasattr(ticket, "active_event"):
        found = _json(ticket.active_event)
        if not found or found["last"] is None:
            return None
        return ActiveSummary(
            summary=_json(found["summary"]),
            summary_tokens=found["tokens"] or 0,
            first_replaced_turn=found["first"],
            last_replaced_turn=found["last"],
        )
    event = active_compaction(ticket, through_turn)
    if event is None:
        return None
    return ActiveSummary(
        summary=event.summary,
        summary_tokens=event.summary_tokens,
        first_replaced_turn=event.first_replaced_turn,
        last_replaced_turn=event.last_replaced_turn,
    )


def context_figures(ticket: Ticket, *, state_tokens: int | None = None) -> ContextFigures:
    """Token figures of the request an agent would assemble now, from stored counts (2 queries at most).

    The turns' share is what the ticket's stored total leaves after the other parts: every writer keeps
    `Ticket.context_tokens` current, so nothing here adds up the turns again.
    """
    ticket_class = ticket.ticket_class
    active = active_summary(ticket)
    if state_tokens is None:
        state_tokens = PinnedState.objects.filter(ticket=ticket).values_list("tokens", flat=True).first() or 0
    summary_tokens = active.summary_tokens if active else 0
    turn_tokens = ticket.context_tokens - ticket.system_prompt_tokens - state_tokens - summary_tokens
    breakdown = TokenBreakdown(
        system=ticket.system_prompt_tokens,
        state=state_tokens,
        summary=summary_tokens,
        turns=max(turn_tokens - REPLY_PRIMING_TOKENS, 0),
    )
    return ContextFigures(
        tokens=breakdown,
        first_active_turn=active.first_active_turn if active else 1,
        threshold_tokens=ticket_class.threshold_tokens,
        token_budget=ticket_class.token_budget,
    )


def state_as_of_turn(ticket: Ticket, turn: int) -> tuple[dict[str, Any], int]:
    """The pinned state as the model read it right after `turn` was stored, and its tokens then: the audit's
    item changes up to then, replayed (one query). Money totals are derived with the class's catalog now."""
    changes = list(
        StateChange.objects.filter(ticket=ticket, thread_turn__lte=turn)
        .order_by("to_version")
        .only("change", "after_tokens", "to_version")
    )
    if not changes:
        return {}, 0
    data = replay_changes(item for change in changes for item in change.item_changes)
    items = StateItems.load(data, tools=ticket.ticket_class.tool_catalog)
    state = agent_state(
        ticket=ticket.ticket_id,
        order=ticket.order_id,
        seller_type=ticket.seller_type,
        version=changes[-1].to_version,
        items=items,
    )
    return model_state(state), changes[-1].after_tokens


def assemble_context(ticket: Ticket, *, through_turn: int | None = None) -> AssembledContext:
    """The request an agent would send for its next turn.

    With `through_turn`, the request as it stood right after that turn was stored (and any
    compaction it triggered applied): the pinned state as of then, the summary active then, and
    the turns it covered. That is the replay a supervisor needs after an incident.

    Built once, from stored counts: a ticket loaded with with_active_summary() costs one more query (the
    turns since the summary), whatever the ticket's length.
    """
    ticket_class = ticket.ticket_class
    active = active_summary(ticket, through_turn)
    first_active = active.first_active_turn if active else 1

    state: dict[str, Any] | str
    if through_turn is None:
        pinned = ticket.pinned_state
        pinned.ticket = ticket
        if "served_model_actions" in ticket.__dict__:  # read with the ticket (context_tickets())
            pinned.__dict__["served_model_actions"] = ticket.__dict__["served_model_actions"]
        stored = pinned.served_text(model=True)  # when read (context_tickets()) and current
        state = stored if stored is not None else model_state(pinned.agent_json())
        state_tokens = pinned.tokens
    else:
        state, state_tokens = state_as_of_turn(ticket, through_turn)

    if through_turn is None:
        rows: Iterable[Any] = TURNS_FROM.iterator(
            ticket.pk, first_active, using=ticket._state.db or "default"
        )
    else:
        rows = (
            Turn.objects.filter(ticket=ticket, number__gte=first_active, number__lte=through_turn)
            .order_by("number")
            .values_list(*_TURN_FIELDS)
        )
    turns = [TurnView(*row) for row in rows]
    pending = pending_claim(ticket) if through_turn is None else None
    return _assembled(
        system_prompt=ticket.system_prompt,
        system_tokens=ticket.system_prompt_tokens,
        state=state,
        state_tokens=state_tokens,
        active=active,
        turns=turns,
        pending=pending,
        token_budget=ticket_class.token_budget,
        threshold_tokens=ticket_class.threshold_tokens,
    )


def _assembled(
    *,
    system_prompt: str,
    system_tokens: int,
    state: dict[str, Any] | str,
    state_tokens: int,
    active: ActiveSummary | None,
    turns: list[TurnView],
    pending: dict[str, Any] | None,
    token_budget: int,
    threshold_tokens: int,
) -> AssembledContext:
    breakdown = TokenBreakdown(
        system=system_tokens,
        state=state_tokens,
        summary=active.summary_tokens if active else 0,
        turns=sum(t.tokens for t in turns),
    )
    covers = None
    if active and active.first_replaced_turn is not None and active.last_replaced_turn is not None:
        covers = (active.first_replaced_turn, active.last_replaced_turn)
    return AssembledContext(
        pending_compaction=pending,
        system_prompt=system_prompt,
        state=state,
        summary=active.summary if active else None,
        summary_covers=covers,
        turns=turns,
        tokens=breakdown,
        token_budget=token_budget,
        threshold_tokens=threshold_tokens,
    )


# The agent's context read as plain rows (desk.api.fast_reads): context_tickets()'s columns, the state's served
# texts and the two events, with no model built; then the turns as rows. Only a state whose served texts are
# current is answered so (else None: the caller takes assemble_context's way).
_CONTEXT_ROW_FIELDS = (
    "pk",
    *_CONTEXT_COLUMNS,
    "pinned_state__id",
    "served_model_actions",
    "active_event",
    "pending_event",
)


def context_rows(
    ticket_id: str, held_state: int = 0, held_version: int = 0
) -> QuerySet[Ticket, tuple[Any, ...]]:
    """The context's row of the ticket as the ORM reads it (CONTEXT_ROW compiles it once). The actions' texts are
    joined unless this process holds them for the state and version given (tickets.served_state.ACTION_TEXTS)."""
    held = ("pinned_state__version", held_state, held_version)
    return (
        with_active_summary(Ticket.objects.order_by())
        .annotate(**served_action_texts("pinned_state__pk", model=True, unless=held))
        .filter(ticket_id=ticket_id)
        .values_list(*_CONTEXT_ROW_FIELDS)
    )


CONTEXT_ROW: CompiledRead[Any] = CompiledRead(lambda t, s, v: context_rows(t, s, v)[:2], str, int, int)


@dataclass(frozen=True)
class _Events:
    """What active_summary and pending_claim read off a ticket loaded with with_active_summary()."""

    active_event: Any
    pending_event: Any


def served_context(ticket_id: str) -> tuple[int, AssembledContext] | None:
    """The ticket's class id and its context with the state as its served text, from plain rows (two
    queries); None for no such ticket or no served text of its state's version."""
    key = (DEFAULT_DB_ALIAS, ticket_id, True)
    rows = CONTEXT_ROW.rows(ticket_id, *ACTION_TEXTS.held(key))
    if len(rows) != 1:
        return None
    (pk, tid, order, seller_type, class_id, prompt, prompt_tokens, budget, share, version, state_tokens,
     served_version, *lists, tail, state_pk, joined, active_event, pending_event) = rows[0]  # fmt: skip
    model_actions = ACTION_TEXTS.resolve(key, state_pk, version, joined)
    if model_actions is None:  # the copy the read relied on went meanwhile: the caller builds the context
        return None
    state = stored_document(
        ticket=tid,
        order=order,
        seller_type=seller_type,
        version=version,
        served_version=served_version,
        lists={**dict(zip(_MODEL_LISTS, lists, strict=True)), MODEL_ACTIONS: model_actions},
        tail=tail,
        model=True,
    )
    if state is None:
        return None
    events = _Events(active_event, pending_event)
    active = active_summary(events)  # type: ignore[arg-type]
    first_active = active.first_active_turn if active else 1
    turns = [
        TurnView(n, role, content, tool, _json(args), call, boundary, tokens)
        for n, role, content, tool, args, call, boundary, tokens in TURNS_FROM.rows(pk, first_active)
    ]
    return class_id, _assembled(
        system_prompt=prompt,
        system_tokens=prompt_tokens,
        state=state,
        state_tokens=state_tokens,
        active=active,
        turns=turns,
        pending=pending_claim(events),  # type: ignore[arg-type]
        token_budget=budget,
        threshold_tokens=int(budget * share),
    )


@dataclass(frozen=True)
class CompactionTotals:
    """What compaction did and cost on one ticket."""

    applied: int
    failed: int
    deferred: int
    tokens_saved: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    cost_usd: Decimal
    latency_ms: int

    def as_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "failed": self.failed,
            "deferred": self.deferred,
            "tokens_saved": self.tokens_saved,
            "summarizer_input_tokens": self.summarizer_input_tokens,
            "summarizer_output_tokens": self.summarizer_output_tokens,
            "cost_usd": str(self.cost_usd),
            "latency_ms": self.latency_ms,
        }


class CompactionFigures(Protocol):
    """What the totals read of an event: a CompactionEvent, or a page's lighter row of its figures."""

    status: str
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    cost_usd: Decimal
    latency_ms: int

    @property
    def tokens_saved(self) -> int: ...


def totals_of(events: Iterable[CompactionFigures]) -> CompactionTotals:
    """Totals over events already loaded (a page that lists them needs no extra query)."""
    events = list(events)
    return CompactionTotals(
        applied=sum(1 for e in events if e.status == CompactionStatus.APPLIED),
        failed=sum(1 for e in events if e.status == CompactionStatus.FAILED),
        deferred=sum(1 for e in events if e.status == CompactionStatus.DEFERRED),
        tokens_saved=sum(e.tokens_saved for e in events),
        summarizer_input_tokens=sum(e.summarizer_input_tokens for e in events),
        summarizer_output_tokens=sum(e.summarizer_output_tokens for e in events),
        cost_usd=sum((e.cost_usd for e in events), Decimal("0")),
        latency_ms=sum(e.latency_ms for e in events),
    )


def compaction_totals(ticket: Ticket) -> CompactionTotals:
    """Per-ticket totals of compaction (one query)."""
    return totals_of(
        CompactionEvent.objects.filter(ticket=ticket).only(
            "status",
            "tokens_before",
            "tokens_after",
            "summarizer_input_tokens",
            "summarizer_output_tokens",
            "cost_usd",
            "latency_ms",
        )
    )
