"""Run the eval: import each ticket into a throw-away database state, compact it, measure what survived.

Everything happens inside one transaction that is rolled back at the end, and each ticket inside
its own savepoint that is rolled back once it is measured, so the real database is never changed
and tickets from different files never collide. The ticket is written through the importer (the
same services a live agent uses, the compaction policy after each turn), with a temporary ticket
class carrying the eval's budget and summarizer. Compaction runs inline (the immediate task
backend) whatever the deployment's task backend is.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.test.utils import override_settings

from compaction.models import CompactionEvent, CompactionStatus
from compaction.selectors import assemble_context
from desk.importer import ImportClass, ImportFileError, ImportTicket, import_ticket
from evals.facts import CATEGORIES, FactCheck, check_facts, expected_facts
from tickets.errors import DeskError, RepeatRefused
from tickets.models import PinnedState, SummarizerBackend, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.tokens import REPLY_PRIMING_TOKENS

IMMEDIATE_TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DEFAULT_MODELS = {"extractive": "extractive-v1", "openai": "gpt-4.1-mini"}


@dataclass(frozen=True)
class EvalOptions:
    summarizer: str = "extractive"
    model: str | None = None
    budget: int | None = None  # None: each ticket's own class budget

    @property
    def summarizer_model(self) -> str:
        return self.model or DEFAULT_MODELS.get(self.summarizer, self.summarizer)


@dataclass(frozen=True)
class Probe:
    """Would the desk refuse a second `tool` on `item` made with a fresh idempotency key?"""

    tool: str
    item: str
    refused: bool
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "item": self.item, "refused": self.refused, "message": self.message}


@dataclass
class TicketResult:
    ticket_id: str
    source: str
    error: str = ""
    turns: int = 0
    budget: int = 0
    threshold_tokens: int = 0
    compactions: dict[str, int] = field(default_factory=dict)
    tokens_uncompacted: int = 0
    tokens_context: int = 0
    events_tokens_before: int = 0
    events_tokens_after: int = 0
    engine_coverage_misses: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    summarizer_cost_usd: Decimal = Decimal(0)
    summarizer_latency_ms: int = 0
    facts: list[FactCheck] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    refunded_cents_expected: int = 0
    refunded_cents_state: int = 0
    scripted_refusals: int = 0
    contexts_checked: int = 0
    seconds: float = 0.0

    @property
    def tokens_saved(self) -> int:
        return self.tokens_uncompacted - self.tokens_context

    def retention(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for category in CATEGORIES:
            checks = [c for c in self.facts if c.fact.category == category]
            out[category] = {
                "total": len(checks),
                "in_state": sum(c.state for c in checks),
                "summary_due": sum(c.summary is not None for c in checks),
                "in_summary": sum(bool(c.summary) for c in checks),
                "in_context": sum(c.context for c in checks),
                "only_in_pinned_state": sum(c.only_in_state for c in checks),
            }
        return out

    @property
    def probes_refused(self) -> int:
        return sum(p.refused for p in self.probes)

    @property
    def ok(self) -> bool:
        """Nothing lost where it must not be: every fact in the state and the context, every probe refused."""
        return (
            not self.error
            and all(c.state and c.context for c in self.facts)
            and all(p.refused for p in self.probes)
            and self.refunded_cents_expected == self.refunded_cents_state
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "ticket_id": self.ticket_id,
            "source": self.source,
            "error": self.error or None,
            "turns": self.turns,
            "budget": self.budget,
            "threshold_tokens": self.threshold_tokens,
            "compactions": self.compactions,
            "tokens": {
                "uncompacted": self.tokens_uncompacted,
                "context": self.tokens_context,
                "saved": self.tokens_saved,
                "compaction_events_before": self.events_tokens_before,
                "compaction_events_after": self.events_tokens_after,
            },
            "summarizer": {
                "input_tokens": self.summarizer_input_tokens,
                "output_tokens": self.summarizer_output_tokens,
                "cost_usd": str(self.summarizer_cost_usd),
                "latency_ms": self.summarizer_latency_ms,
            },
            "engine_coverage_misses": self.engine_coverage_misses,
            "retention": self.retention(),
            "contexts_checked": self.contexts_checked,
            "facts": [c.as_json() for c in self.facts],
            "probes": [p.as_json() for p in self.probes],
            "refunded_cents": {"expected": self.refunded_cents_expected, "state": self.refunded_cents_state},
            "scripted_refusals": self.scripted_refusals,
            "ok": self.ok,
        }


@dataclass
class EvalReport:
    options: EvalOptions
    tickets: list[TicketResult] = field(default_factory=list)
    seconds: float = 0.0

    def totals(self) -> dict[str, Any]:
        tickets = self.tickets
        compactions: dict[str, int] = {}
        for t in tickets:
            for status, n in t.compactions.items():
                compactions[status] = compactions.get(status, 0) + n
        retention = {
            category: {
                key: sum(t.retention()[category][key] for t in tickets)
                for key in (
                    "total",
                    "in_state",
                    "summary_due",
                    "in_summary",
                    "in_context",
                    "only_in_pinned_state",
                )
            }
            for category in CATEGORIES
        }
        uncompacted = sum(t.tokens_uncompacted for t in tickets)
        context = sum(t.tokens_context for t in tickets)
        return {
            "tickets": len(tickets),
            "errors": sum(bool(t.error) for t in tickets),
            "tickets_compacted": sum(bool(t.compactions.get(CompactionStatus.APPLIED)) for t in tickets),
            "turns": sum(t.turns for t in tickets),
            "compactions": compactions,
            "tokens": {
                "uncompacted": uncompacted,
                "context": context,
                "saved": uncompacted - context,
                "saved_share": round((uncompacted - context) / uncompacted, 4) if uncompacted else 0.0,
                "compaction_events_before": sum(t.events_tokens_before for t in tickets),
                "compaction_events_after": sum(t.events_tokens_after for t in tickets),
            },
            "summarizer_cost_usd": str(sum((t.summarizer_cost_usd for t in tickets), Decimal(0))),
            "engine_coverage_misses": sum(t.engine_coverage_misses for t in tickets),
            "retention": retention,
            "probes": {
                "total": sum(len(t.probes) for t in tickets),
                "refused": sum(t.probes_refused for t in tickets),
            },
            "refunded_cents": {
                "expected": sum(t.refunded_cents_expected for t in tickets),
                "state": sum(t.refunded_cents_state for t in tickets),
            },
            "scripted_refusals": sum(t.scripted_refusals for t in tickets),
            "ok": all(t.ok for t in tickets),
        }

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tickets)

    def as_json(self) -> dict[str, Any]:
        return {
            "summarizer": self.options.summarizer,
            "summarizer_model": self.options.summarizer_model,
            "budget": self.options.budget,
            "seconds": round(self.seconds, 2),
            "totals": self.totals(),
            "tickets": [t.as_json() for t in self.tickets],
        }


class _RollBack(Exception):
    """Raised to leave a savepoint the way it was entered."""


def _class_spec(doc: ImportTicket) -> dict[str, Any]:
    """The budget figures of the ticket's own class (a slug names an existing class)."""
    spec = doc.ticket_class
    if isinstance(spec, ImportClass):
        return {
            "token_budget": spec.token_budget,
            "compaction_threshold": spec.compaction_threshold,
            "keep_recent_tokens": spec.keep_recent_tokens or 0,
        }
    found = TicketClass.objects.filter(slug=spec).first()
    if found is None:
        raise ImportFileError(f"ticket {doc.ticket_id}: ticket_class: no class with slug {spec!r}")
    return {
        "token_budget": found.token_budget,
        "compaction_threshold": found.compaction_threshold,
        "keep_recent_tokens": found.keep_recent_tokens,
        "encoding": found.encoding,
        "system_prompt": found.system_prompt,
    }


def _eval_class(doc: ImportTicket, options: EvalOptions) -> TicketClass:
    fields = _class_spec(doc)
    if options.budget is not None:
        fields["token_budget"] = options.budget
        fields["keep_recent_tokens"] = 0  # a quarter of the eval's budget
    return TicketClass.objects.create(
        slug=f"eval-{uuid.uuid4().hex[:12]}",
        summarizer_backend=SummarizerBackend(options.summarizer),
        summarizer_model=options.summarizer_model,
        **fields,
    )


def probe_repeat(ticket: Ticket, *, tool: str, item: str, amount_cents: int) -> Probe:
    """Try the action again with a fresh key, as an agent that forgot it would; undo it if it went through."""
    try:
        with transaction.atomic():
            record_action(
                ticket=ticket,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                idempotency_key=f"eval-probe-{uuid.uuid4().hex}",
                reversible=False,
                args={"eval_probe": True},
            )
            raise _RollBack
    except RepeatRefused as refused:
        return Probe(tool=tool, item=item, refused=True, message=refused.message)
    except _RollBack:
        return Probe(
            tool=tool, item=item, refused=False, message="recorded: the desk did not refuse the repeat"
        )


def _measure(doc: ImportTicket, ticket: Ticket, result: TicketResult) -> None:
    ticket = Ticket.objects.select_related("ticket_class").get(pk=ticket.pk)
    ticket_class = ticket.ticket_class
    result.budget = ticket_class.token_budget
    result.threshold_tokens = ticket_class.threshold_tokens
    events = list(CompactionEvent.objects.filter(ticket=ticket).order_by("number"))
    for event in events:
        result.compactions[event.status] = result.compactions.get(event.status, 0) + 1
        result.summarizer_input_tokens += event.summarizer_input_tokens
        result.summarizer_output_tokens += event.summarizer_output_tokens
        result.summarizer_cost_usd += event.cost_usd
        result.summarizer_latency_ms += event.latency_ms
    applied = [e for e in events if e.status == CompactionStatus.APPLIED]
    result.events_tokens_before = sum(e.tokens_before for e in applied)
    result.events_tokens_after = sum(e.tokens_after or 0 for e in applied)
    result.engine_coverage_misses = sum(e.coverage_missing_count for e in applied)

    pinned = PinnedState.objects.select_related("ticket").get(ticket=ticket)
    state = pinned.agent_json()
    all_turns = Turn.objects.filter(ticket=ticket).aggregate(total=Sum("tokens"))["total"] or 0
    result.tokens_uncompacted = ticket.system_prompt_tokens + pinned.tokens + all_turns + REPLY_PRIMING_TOKENS
    context = assemble_context(ticket)
    result.tokens_context = context.tokens.total
    # What the agent sees right after each compaction, and at the end of the ticket.
    contexts: list[tuple[int | None, list[dict[str, Any]]]] = [
        (e.at_turn, assemble_context(ticket, through_turn=e.at_turn).messages()) for e in applied
    ]
    contexts.append((None, context.messages()))
    result.contexts_checked = len(contexts)

    facts = expected_facts(doc)
    result.facts = check_facts(
        facts,
        state=state,
        summary=context.summary,
        summary_written_at=applied[-1].at_turn if applied else None,
        contexts=contexts,
    )
    result.refunded_cents_expected = sum(f.amount_cents for f in facts if f.category == "actions_taken")
    result.refunded_cents_state = int(state.get("refunded_cents_total") or 0)
    seen: set[tuple[str, str]] = set()
    for fact in facts:
        if fact.category == "actions_taken" and (fact.tool, fact.item) not in seen:
            seen.add((fact.tool, fact.item))
            result.probes.append(
                probe_repeat(ticket, tool=fact.tool, item=fact.item, amount_cents=fact.amount_cents)
            )


def evaluate_ticket(doc: ImportTicket, *, source: str, options: EvalOptions) -> TicketResult:
    """Import, compact and measure one ticket inside a savepoint that is always rolled back."""
    started = time.perf_counter()
    result = TicketResult(ticket_id=doc.ticket_id, source=source, turns=len(doc.turns))
    try:
        with transaction.atomic():
            ticket_class = _eval_class(doc, options)
            ticket_id = doc.ticket_id
            if Ticket.objects.filter(ticket_id=ticket_id).exists():  # already in the real database
                ticket_id = f"eval~{ticket_id}"[:64]
            imported = import_ticket(
                doc.model_copy(update={"ticket_id": ticket_id, "ticket_class": ticket_class.slug}),
                source=source,
            )
            result.scripted_refusals = imported.refused_as_expected
            _measure(doc, Ticket.objects.get(ticket_id=ticket_id), result)
            raise _RollBack
    except _RollBack:
        pass
    except (ImportFileError, DeskError) as exc:
        result.error = str(exc)
    result.seconds = time.perf_counter() - started
    return result


def evaluate(
    documents: Iterable[tuple[str, ImportTicket]],
    *,
    options: EvalOptions,
    progress: Callable[[int, TicketResult], None] | None = None,
) -> EvalReport:
    """Evaluate every ticket; the database is left exactly as it was."""
    report = EvalReport(options=options)
    started = time.perf_counter()
    with override_settings(TASKS=IMMEDIATE_TASKS):
        try:
            with transaction.atomic():
                for index, (source, doc) in enumerate(documents, start=1):
                    result = evaluate_ticket(doc, source=source, options=options)
                    report.tickets.append(result)
                    if progress is not None:
                        progress(index, result)
                raise _RollBack
        except _RollBack:
            pass
    report.seconds = time.perf_counter() - started
    return report
