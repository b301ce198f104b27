"""Reads of the assembled context: sums of stored counts, a constant number of queries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Sum

from compaction.context import AssembledContext, TokenBreakdown, TurnView
from compaction.models import CompactionEvent, CompactionStatus
from tickets.models import PinnedState, StateChange, Ticket, Turn


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


def context_figures(ticket: Ticket, *, state_tokens: int | None = None) -> ContextFigures:
    """Token figures of the request an agent would assemble now (3 queries at most)."""
    ticket_class = ticket.ticket_class
    active = active_compaction(ticket)
    first_active = (active.last_replaced_turn or 0) + 1 if active else 1
    turn_tokens = (
        Turn.objects.filter(ticket=ticket, number__gte=first_active).aggregate(total=Sum("tokens"))["total"]
        or 0
    )
    if state_tokens is None:
        state_tokens = PinnedState.objects.filter(ticket=ticket).values_list("tokens", flat=True).first() or 0
    breakdown = TokenBreakdown(
        system=ticket.system_prompt_tokens,
        state=state_tokens,
        summary=active.summary_tokens if active else 0,
        turns=turn_tokens,
    )
    return ContextFigures(
        tokens=breakdown,
        first_active_turn=first_active,
        threshold_tokens=ticket_class.threshold_tokens,
        token_budget=ticket_class.token_budget,
    )


def assemble_context(ticket: Ticket, *, through_turn: int | None = None) -> AssembledContext:
    """The request an agent would send for its next turn.

    With `through_turn`, the request as it stood right after that turn was stored (and any
    compaction it triggered applied): the pinned state as of then, the summary active then, and
    the turns it covered. That is the replay a supervisor needs after an incident.
    """
    ticket_class = ticket.ticket_class
    active = active_compaction(ticket, through_turn)
    first_active = (active.last_replaced_turn or 0) + 1 if active else 1

    if through_turn is None:
        pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)
        state_json = pinned.agent_json()
        state_tokens = pinned.tokens
    else:
        change = (
            StateChange.objects.filter(ticket=ticket, thread_turn__lte=through_turn)
            .order_by("-to_version")
            .only("after", "after_tokens")
            .first()
        )
        state_json = change.after if change else {}
        state_tokens = change.after_tokens if change else 0

    turns_qs = Turn.objects.filter(ticket=ticket, number__gte=first_active).order_by("number")
    if through_turn is not None:
        turns_qs = turns_qs.filter(number__lte=through_turn)
    turns = [
        TurnView(
            number=t.number,
            role=t.role,
            content=t.content,
            tool=t.tool,
            args=t.args,
            tool_call_id=t.tool_call_id,
            boundary=t.boundary,
            tokens=t.tokens,
        )
        for t in turns_qs
    ]
    breakdown = TokenBreakdown(
        system=ticket.system_prompt_tokens,
        state=state_tokens,
        summary=active.summary_tokens if active else 0,
        turns=sum(t.tokens for t in turns),
    )
    covers = None
    if active and active.first_replaced_turn is not None and active.last_replaced_turn is not None:
        covers = (active.first_replaced_turn, active.last_replaced_turn)
    pending = None
    if through_turn is None:
        claim = pending_compaction(ticket)
        if claim is not None:
            pending = {
                "number": claim.number,
                "since": claim.created_at.isoformat(),
                "running": claim.status == CompactionStatus.RUNNING,
                "upto_turn": claim.upto_turn,
            }
    return AssembledContext(
        pending_compaction=pending,
        system_prompt=ticket.system_prompt,
        pinned_state=state_json,
        summary=active.summary if active else None,
        summary_covers=covers,
        turns=turns,
        tokens=breakdown,
        token_budget=ticket_class.token_budget,
        threshold_tokens=ticket_class.threshold_tokens,
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


def totals_of(events: Iterable[CompactionEvent]) -> CompactionTotals:
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
