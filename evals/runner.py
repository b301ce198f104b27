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

from compaction.models import CompactionEvent
from compaction.selectors import assemble_context
from core.context import summary_message
from core.errors import DeskError
from core.identity import ToolCatalog
from core.policy import TurnInfo, complete_prefix
from core.state import MONEY_TOTALS
from core.tokens import RequestSize, count_message, state_message, turn_text
from core.vocabulary import CompactionStatus, SummarizerBackend
from desk.importer import ImportClass, ImportFileError, ImportTicket, import_ticket_rolled_back
from evals.baseline import baseline_messages, baseline_summary, rolling_summary
from evals.cost import Prices, TicketCost, summed, ticket_cost
from evals.facts import CATEGORIES, FactCheck, check_baseline, check_facts, expected_facts
from evals.money import TOTAL_OF, replay
from evals.outcomes import Outcomes, measure, questions_for
from evals.tau import is_adapted, source_of
from tickets.errors import RepeatRefused
from tickets.models import PinnedState, Ticket, TicketClass, Turn
from tickets.services.actions import record_action

IMMEDIATE_TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DEFAULT_MODELS = {"extractive": "extractive-v1", "openai": "gpt-4.1-mini"}


@dataclass(frozen=True)
class EvalOptions:
    summarizer: str = "extractive"
    model: str | None = None
    budget: int | None = None  # None: each ticket's own class budget
    # The working model asked the outcome questions (evals/outcomes.py), through OPENAI_BASE_URL; None: not asked.
    outcomes_model: str | None = None

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


REPLACING = CompactionStatus.replacing()
STATUSES = ("applied", "forced", "failed", "deferred", "over_budget", "superseded", "pending")
RETENTION_KEYS = (
    "total",
    "in_state",
    "summary_due",
    "in_summary",
    "in_context",
    "in_context_without_state",
    "only_in_pinned_state",
    "baseline_summary_due",
    "baseline_in_summary",
    "baseline_in_context",
    "in_transcript",
    "baseline_in_context_of_transcript",
)


@dataclass(frozen=True)
class EventFigures:
    """One compaction event as the eval reports it."""

    number: int
    status: str
    at_turn: int
    tokens_before: int
    tokens_after: int | None
    reason: str = ""

    @property
    def shrank(self) -> bool:
        return self.tokens_after is not None and self.tokens_after < self.tokens_before

    def as_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "status": self.status,
            "at_turn": self.at_turn,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "reason": self.reason or None,
        }


@dataclass
class TicketResult:
    ticket_id: str
    source: str
    domain: str = ""
    error: str = ""
    turns: int = 0
    budget: int = 0
    threshold_tokens: int = 0
    system_prompt_tokens: int = 0
    compactions: dict[str, int] = field(default_factory=dict)
    events: list[EventFigures] = field(default_factory=list)
    tokens_uncompacted: int = 0
    tokens_context: int = 0
    tokens_baseline_context: int = 0
    # The end of the ticket: is the request over the budget, and could a compaction still have cut it?
    ended_over_budget: bool = False
    safe_cut_at_end: bool = False
    events_tokens_before: int = 0
    events_tokens_after: int = 0
    engine_coverage_misses: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    summarizer_cost_usd: Decimal = Decimal(0)
    summarizer_latency_ms: int = 0
    facts: list[FactCheck] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    # Money: the pinned state's three totals, the independent figure in the same three directions (the
    # writes replayed against the domain's data, `evals/money.py`; for the project's own format, the
    # document's actions), and the adapter's own ledger, reported beside them.
    money_state: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MONEY_TOTALS, 0))
    money_independent: dict[str, int] | None = None
    money_ledger: dict[str, int] | None = None
    money_replayed: dict[str, int] | None = None  # every direction each write moved, before the catalog
    money_source: str = ""
    scripted_refusals: int = 0
    ticket_class: str = ""  # the class the document names (the eval runs it on a copy)
    # The simulated customer's brief (an adapted tau transcript): the eval's oracle, never pinned whole.
    brief_sentences: int = 0
    brief_stated: int = 0
    cost: TicketCost | None = None
    outcomes: Outcomes | None = None
    contexts_checked: int = 0
    seconds: float = 0.0

    @property
    def tokens_saved(self) -> int:
        return self.tokens_uncompacted - self.tokens_context

    @property
    def over_budget_with_safe_cut(self) -> bool:
        return self.ended_over_budget and self.safe_cut_at_end

    @property
    def not_shrinking(self) -> list[EventFigures]:
        """Compactions that replaced turns without making the request smaller."""
        return [e for e in self.events if e.status in REPLACING and not e.shrank]

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
                "in_context_without_state": sum(c.context_without_state for c in checks),
                "only_in_pinned_state": sum(c.only_in_state for c in checks),
                "baseline_summary_due": sum(c.baseline_summary is not None for c in checks),
                "baseline_in_summary": sum(bool(c.baseline_summary) for c in checks),
                "baseline_in_context": sum(bool(c.baseline_context) for c in checks),
                "in_transcript": sum(bool(c.in_transcript) for c in checks),
                "baseline_in_context_of_transcript": sum(
                    bool(c.baseline_context and c.in_transcript) for c in checks
                ),
            }
        return out

    @property
    def probes_refused(self) -> int:
        return sum(p.refused for p in self.probes)

    def problems(self) -> list[str]:
        """Why `--check` fails on this ticket; empty when it passes."""
        if self.error:
            return [f"did not import: {self.error}"]
        out = []
        if self.over_budget_with_safe_cut:
            out.append(
                f"ended at {self.tokens_context} tokens, over its {self.budget}-token budget, "
                "although a safe cut existed"
            )
        for event in self.not_shrinking:
            out.append(
                f"compaction {event.number} ({event.status}) did not shrink the request: "
                f"{event.tokens_before} -> {event.tokens_after} tokens"
            )
        for check in self.facts:
            if not check.state:
                out.append(f"lost from the pinned state: {check.fact.category} {check.fact.label!r}")
            elif not check.context:
                out.append(f"lost from the context: {check.fact.category} {check.fact.label!r}")
        for probe in self.probes:
            if not probe.refused:
                out.append(f"a repeat {probe.tool} on {probe.item} was not refused")
        if self.money_independent is not None:
            for total in MONEY_TOTALS:
                if self.money_independent[total] != self.money_state[total]:
                    out.append(
                        f"{total}: {self.money_independent[total]} cents by {self.money_source}, "
                        f"{self.money_state[total]} in the pinned state"
                    )
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    def as_json(self) -> dict[str, Any]:
        return {
            "ticket_id": self.ticket_id,
            "source": self.source,
            "domain": self.domain,
            "error": self.error or None,
            "turns": self.turns,
            "budget": self.budget,
            "threshold_tokens": self.threshold_tokens,
            "system_prompt_tokens": self.system_prompt_tokens,
            "compactions": self.compactions,
            "events": [e.as_json() for e in self.events],
            "ended_over_budget": self.ended_over_budget,
            "safe_cut_at_end": self.safe_cut_at_end,
            "tokens": {
                "uncompacted": self.tokens_uncompacted,
                "context": self.tokens_context,
                "saved": self.tokens_saved,
                "baseline_context": self.tokens_baseline_context,
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
            "money": {
                "state": self.money_state,
                "independent": self.money_independent,
                "independent_source": self.money_source,
                "replayed_all_directions": self.money_replayed,
                "adapter_ledger": self.money_ledger,
            },
            "scripted_refusals": self.scripted_refusals,
            "ticket_class": self.ticket_class,
            "brief": {"sentences": self.brief_sentences, "stated_in_conversation": self.brief_stated},
            "cost": self.cost.as_json() if self.cost else None,
            "outcomes": self.outcomes.as_json() if self.outcomes else None,
            "problems": self.problems(),
            "ok": self.ok,
        }


def aggregate(tickets: list[TicketResult]) -> dict[str, Any]:
    """Every figure summed over a group of tickets (a file, a domain, or the whole run)."""
    compactions = {status: sum(t.compactions.get(status, 0) for t in tickets) for status in STATUSES}
    retention = {
        category: {key: sum(t.retention()[category][key] for t in tickets) for key in RETENTION_KEYS}
        for category in CATEGORIES
    }
    uncompacted = sum(t.tokens_uncompacted for t in tickets)
    context = sum(t.tokens_context for t in tickets)
    return {
        "tickets": len(tickets),
        "errors": sum(bool(t.error) for t in tickets),
        "tickets_compacted": sum(any(t.compactions.get(s) for s in REPLACING) for t in tickets),
        "tickets_ended_over_budget": sum(t.ended_over_budget for t in tickets),
        "tickets_over_budget_with_safe_cut": sum(t.over_budget_with_safe_cut for t in tickets),
        "compactions_not_shrinking": sum(len(t.not_shrinking) for t in tickets),
        "turns": sum(t.turns for t in tickets),
        "compactions": compactions,
        "tokens": {
            "uncompacted": uncompacted,
            "context": context,
            "saved": uncompacted - context,
            "saved_share": round((uncompacted - context) / uncompacted, 4) if uncompacted else 0.0,
            "baseline_context": sum(t.tokens_baseline_context for t in tickets),
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
        "money": money_totals(tickets),
        "scripted_refusals": sum(t.scripted_refusals for t in tickets),
        "brief": {
            "sentences": sum(t.brief_sentences for t in tickets),
            "stated_in_conversation": sum(t.brief_stated for t in tickets),
        },
        "problems": sum(len(t.problems()) for t in tickets),
        "ok": all(t.ok for t in tickets),
    }


def money_totals(tickets: list[TicketResult]) -> dict[str, Any]:
    """Per money total: the pinned states' sum, the independent figures' sum (over the tickets that have
    one) and the tickets where the two differ."""
    checked = [t for t in tickets if t.money_independent is not None]
    out: dict[str, Any] = {}
    for total in MONEY_TOTALS:
        out[total] = {
            "state": sum(t.money_state[total] for t in tickets),
            "state_of_checked": sum(t.money_state[total] for t in checked),
            "independent": sum((t.money_independent or {})[total] for t in checked),
            "tickets_differing": sum(
                (t.money_independent or {})[total] != t.money_state[total] for t in checked
            ),
        }
    out["tickets_checked"] = len(checked)
    return out


def _grouped(
    tickets: list[TicketResult], key: Callable[[TicketResult], str]
) -> dict[str, list[TicketResult]]:
    groups: dict[str, list[TicketResult]] = {}
    for ticket in tickets:
        groups.setdefault(key(ticket), []).append(ticket)
    return groups


@dataclass
class EvalReport:
    options: EvalOptions
    tickets: list[TicketResult] = field(default_factory=list)
    seconds: float = 0.0

    def totals(self) -> dict[str, Any]:
        return aggregate(self.tickets)

    def by_file(self) -> dict[str, dict[str, Any]]:
        return {name: aggregate(group) for name, group in _grouped(self.tickets, lambda t: t.source).items()}

    def by_domain(self) -> dict[str, dict[str, Any]]:
        return {name: aggregate(group) for name, group in _grouped(self.tickets, lambda t: t.domain).items()}

    def outcomes(self) -> dict[str, Any]:
        """Per context (full, desk, baseline): agreement with the truth and with the full context, repeats."""
        if not self.options.outcomes_model:
            return {"skipped": "no working model asked (compaction_eval --outcomes-model NAME)"}

        def of(tickets: list[TicketResult]) -> dict[str, Any]:
            total = Outcomes()
            for ticket in tickets:
                if ticket.outcomes:
                    total.add(ticket.outcomes)
            return total.as_json()

        return {
            "model": self.options.outcomes_model,
            "note": "asked at each ticket's last compaction; with a 135M model the figures are a floor",
            **of(self.tickets),
            "by_domain": {
                name: of(group) for name, group in _grouped(self.tickets, lambda t: t.domain).items()
            },
        }

    def cost(self) -> dict[str, Any]:
        """Summarizer cost, tokens not re-sent and the compaction-to-turn ratio: all, per domain, per class."""

        def of(tickets: list[TicketResult]) -> dict[str, Any]:
            compactions = [c for t in tickets if t.cost for c in t.cost.compactions]
            figures = summed(compactions, None)
            savings = sum(
                (c.savings_usd(t.cost.prices) for t in tickets if t.cost for c in t.cost.compactions),
                Decimal(0),
            )
            cost = Decimal(figures["summarizer_cost_usd"])
            figures["savings_usd"] = str(savings.quantize(Decimal("0.000001")))
            figures["net_savings_usd"] = str((savings - cost).quantize(Decimal("0.000001")))
            return figures

        return {
            **of(self.tickets),
            "by_domain": {
                name: of(group) for name, group in _grouped(self.tickets, lambda t: t.domain).items()
            },
            "by_class": {
                name: of(group) for name, group in _grouped(self.tickets, lambda t: t.ticket_class).items()
            },
        }

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tickets)

    def problems(self) -> list[str]:
        return [f"{t.ticket_id}: {problem}" for t in self.tickets for problem in t.problems()]

    def as_json(self) -> dict[str, Any]:
        return {
            "summarizer": self.options.summarizer,
            "summarizer_model": self.options.summarizer_model,
            "budget": self.options.budget,
            "seconds": round(self.seconds, 2),
            "totals": self.totals(),
            "files": self.by_file(),
            "domains": self.by_domain(),
            "problems": self.problems(),
            "cost": self.cost(),
            "outcomes": self.outcomes(),
            "tickets": [t.as_json() for t in self.tickets],
        }


class _RollBack(Exception):
    """Raised to leave a savepoint the way it was entered."""


def _class_spec(doc: ImportTicket) -> dict[str, Any]:
    """The budget figures of the ticket's own class (a slug names an existing class)."""
    spec = doc.ticket_class
    if isinstance(spec, ImportClass):
        fields: dict[str, Any] = {
            "token_budget": spec.token_budget,
            "compaction_threshold": spec.compaction_threshold,
            "keep_recent_tokens": spec.keep_recent_tokens or 0,
        }
        if spec.money_tools is not None:
            fields["money_tools"] = spec.money_tools
        if spec.irreversible_tools is not None:
            fields["irreversible_tools"] = spec.irreversible_tools
        return fields
    found = TicketClass.objects.filter(slug=spec).first()
    if found is None:
        raise ImportFileError(f"ticket {doc.ticket_id}: ticket_class: no class with slug {spec!r}")
    return {
        "token_budget": found.token_budget,
        "compaction_threshold": found.compaction_threshold,
        "keep_recent_tokens": found.keep_recent_tokens,
        "encoding": found.encoding,
        "system_prompt": found.system_prompt,
        "money_tools": found.money_tools,
        "irreversible_tools": found.irreversible_tools,
    }


def _eval_class(doc: ImportTicket, options: EvalOptions) -> TicketClass:
    fields = _class_spec(doc)
    # An adapted tau transcript got the budget (on top of its policy) from the adapter.
    if options.budget is not None and not is_adapted(doc):
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


def _window_at_end(ticket: Ticket, first_active_turn: int) -> list[TurnInfo]:
    rows = Turn.objects.filter(ticket=ticket, number__gte=first_active_turn).order_by("number")
    return [
        TurnInfo(number=n, role=r, tokens=t, boundary=b, tool_call_id=c, tool=tool)
        for n, r, t, b, c, tool in rows.values_list(
            "number", "role", "tokens", "boundary", "tool_call_id", "tool"
        )
    ]


def _turn_dicts(ticket: Ticket, first: int, last: int) -> list[dict[str, Any]]:
    rows = Turn.objects.filter(ticket=ticket, number__gte=first, number__lte=last).order_by("number")
    return [
        {"number": n, "role": r, "content": c, "tool": tool, "args": a}
        for n, r, c, tool, a in rows.values_list("number", "role", "content", "tool", "args")
    ]


def _money_independent(doc: ImportTicket, catalog: ToolCatalog, result: TicketResult) -> None:
    """The money the pinned state should total, worked out without the adapter's ledger.

    An adapted airline or retail transcript: its writes replayed against the domain's initial data, each
    write's money in the direction its tool has in the class's catalog. The project's own format: the
    document's actions (what it says moved). Telecom: none (no domain data here), reported as unchecked.
    """
    ledger = source_of(doc).get("money")
    result.money_ledger = {k: int(v) for k, v in ledger.items()} if isinstance(ledger, dict) else None
    expected = dict.fromkeys(MONEY_TOTALS, 0)
    if is_adapted(doc):
        replayed = replay(doc)
        if replayed is None:
            result.money_source = "unchecked: no initial data for this domain"
            return
        if replayed.unchecked:
            tools = ", ".join(sorted({f"{w.tool} on {w.record}" for w in replayed.unchecked}))
            result.money_source = f"unchecked: no domain data or earlier result for {tools}"
            result.money_replayed = replayed.totals.as_json()
            return
        for write in replayed.writes:
            effect = catalog.money_effect(write.tool)
            if effect is not None:
                expected[TOTAL_OF[effect]] += write.moved.of(effect)
        result.money_replayed = replayed.totals.as_json()
        result.money_source = "the writes replayed against the domain's data"
        if replayed.unknown_records:
            result.money_source += (
                f" ({len(replayed.unknown_records)} record(s) first shown by the transcript)"
            )
    else:
        for turn in doc.turns:
            for event in turn.events:
                if event.type == "action_taken" and not event.expect_refused:
                    effect = catalog.money_effect(event.tool or "")
                    if effect is not None:
                        expected[TOTAL_OF[effect]] += event.amount_cents
        result.money_source = "the document's actions"
    result.money_independent = expected


def _outcomes_client() -> Any:
    import openai

    return openai.OpenAI(timeout=300, max_retries=0)


def _measure(
    doc: ImportTicket, ticket: Ticket, result: TicketResult, outcomes_model: str | None = None
) -> None:
    ticket = Ticket.objects.select_related("ticket_class").get(pk=ticket.pk)
    ticket_class = ticket.ticket_class
    result.budget = ticket_class.token_budget
    result.threshold_tokens = ticket_class.threshold_tokens
    result.system_prompt_tokens = ticket.system_prompt_tokens
    events = list(CompactionEvent.objects.filter(ticket=ticket).order_by("number"))
    for event in events:
        result.compactions[event.status] = result.compactions.get(event.status, 0) + 1
        result.events.append(
            EventFigures(
                number=event.number,
                status=event.status,
                at_turn=event.at_turn,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                reason=event.reason,
            )
        )
        result.summarizer_input_tokens += event.summarizer_input_tokens
        result.summarizer_output_tokens += event.summarizer_output_tokens
        result.summarizer_cost_usd += event.cost_usd
        result.summarizer_latency_ms += event.latency_ms
    applied = [e for e in events if e.status in REPLACING]
    result.events_tokens_before = sum(e.tokens_before for e in applied)
    result.events_tokens_after = sum(e.tokens_after or 0 for e in applied)
    result.engine_coverage_misses = sum(e.coverage_missing_count for e in applied)

    pinned = PinnedState.objects.select_related("ticket").get(ticket=ticket)
    state = pinned.agent_json()
    all_turns = Turn.objects.filter(ticket=ticket).aggregate(total=Sum("tokens"))["total"] or 0
    result.tokens_uncompacted = RequestSize(
        system=ticket.system_prompt_tokens, state=pinned.tokens, turns=all_turns
    ).total
    context = assemble_context(ticket)
    result.tokens_context = context.tokens.total
    result.ended_over_budget = result.tokens_context > ticket_class.token_budget
    first_active = (applied[-1].last_replaced_turn or 0) + 1 if applied else 1
    result.safe_cut_at_end = complete_prefix(_window_at_end(ticket, first_active)) > 0

    # What the agent sees right after each compaction, and at the end of the ticket; and the same
    # requests with the summary-only baseline in place of the pinned state and the desk's summary.
    assembled = [assemble_context(ticket, through_turn=e.at_turn) for e in applied]
    contexts: list[tuple[int | None, list[dict[str, Any]]]] = [
        (e.at_turn, a.messages()) for e, a in zip(applied, assembled, strict=True)
    ]
    contexts.append((None, context.messages()))
    result.contexts_checked = len(contexts)
    rolling: list[str] = []
    for event, at in zip(applied, assembled, strict=True):
        room = len(state_message(at.pinned_state)) + len(summary_message(at.summary or {}))
        turns = _turn_dicts(ticket, event.first_replaced_turn or 0, event.last_replaced_turn or 0)
        rolling.append(rolling_summary(rolling[-1] if rolling else "", turns, room_chars=room))
    # After compaction k the baseline carries its k-th rolling summary; at the end, its latest one.
    latest = rolling[-1] if rolling else None
    baseline_contexts = [
        (at, baseline_messages(messages, rolling[index] if index < len(rolling) else latest))
        for index, (at, messages) in enumerate(contexts)
    ]
    baseline_summary_tokens = (
        count_message(summary_message(baseline_summary(latest)), ticket_class.encoding) if latest else 0
    )
    result.tokens_baseline_context = (
        context.tokens.total - context.tokens.state - context.tokens.summary + baseline_summary_tokens
    )

    if outcomes_model and applied:
        last = applied[-1]
        full = [
            {"role": "system", "content": ticket.system_prompt or ""},
            *_turn_dicts(ticket, 1, last.at_turn),
        ]
        result.outcomes = measure(
            _outcomes_client(),
            outcomes_model,
            questions_for(assembled[-1].pinned_state),
            {
                "full": full,
                "desk": contexts[len(applied) - 1][1],
                "baseline": baseline_contexts[len(applied) - 1][1],
            },
        )

    facts = expected_facts(doc)
    checks = check_facts(
        facts,
        state=state,
        summary=context.summary,
        summary_written_at=applied[-1].at_turn if applied else None,
        contexts=contexts,
    )
    result.facts = check_baseline(
        checks,
        summary_text=latest,
        summary_written_at=applied[-1].at_turn if applied else None,
        contexts=baseline_contexts,
        transcript=[
            {
                "role": t["role"],
                "content": turn_text(role=t["role"], content=t["content"], tool=t["tool"], args=t["args"]),
            }
            for t in _turn_dicts(ticket, 1, len(doc.turns))
        ],
    )
    result.cost = ticket_cost(
        events=[
            {
                "number": e.number,
                "at_turn": e.at_turn,
                "tokens_before": e.tokens_before,
                "tokens_after": e.tokens_after,
                "summarizer_input_tokens": e.summarizer_input_tokens,
                "summarizer_output_tokens": e.summarizer_output_tokens,
                "latency_ms": e.latency_ms,
                "cost_usd": e.cost_usd,
            }
            for e in applied
        ],
        turns=list(
            Turn.objects.filter(ticket=ticket).order_by("number").values_list("number", "role", "tokens")
        ),
        prices=Prices(ticket_class.working_input_price, ticket_class.working_output_price),
    )
    brief = source_of(doc).get("brief") or []
    result.brief_sentences = len(brief)
    result.brief_stated = sum(1 for b in brief if b.get("stated_at_turn") is not None)
    result.money_state = {total: int(state.get(total) or 0) for total in MONEY_TOTALS}
    _money_independent(doc, ticket_class.tool_catalog, result)
    seen: set[tuple[str, str]] = set()
    for fact in facts:
        if fact.category == "actions_taken" and (fact.tool, fact.item) not in seen:
            seen.add((fact.tool, fact.item))
            result.probes.append(
                probe_repeat(ticket, tool=fact.tool, item=fact.item, amount_cents=fact.amount_cents)
            )


def domain_label(doc: ImportTicket) -> str:
    """'tau2-bench airline', 'tau-bench retail', ... or 'sundry-ticket' for the project's own format."""
    source = source_of(doc)
    if is_adapted(doc):
        return f"{source.get('format')} {source.get('domain') or 'unknown'}"
    return "sundry-ticket"


def evaluate_ticket(doc: ImportTicket, *, source: str, options: EvalOptions) -> TicketResult:
    """Import, compact and measure one ticket inside a savepoint that is always rolled back."""
    started = time.perf_counter()
    result = TicketResult(
        ticket_id=doc.ticket_id,
        source=source,
        domain=domain_label(doc),
        turns=len(doc.turns),
        ticket_class=doc.ticket_class.slug
        if isinstance(doc.ticket_class, ImportClass)
        else str(doc.ticket_class),
    )
    try:
        with transaction.atomic():
            ticket_class = _eval_class(doc, options)
            ticket_id = doc.ticket_id
            if Ticket.objects.filter(ticket_id=ticket_id).exists():  # already in the real database
                ticket_id = f"eval~{ticket_id}"[:64]
            imported = import_ticket_rolled_back(
                doc.model_copy(update={"ticket_id": ticket_id, "ticket_class": ticket_class.slug}),
                source=source,
            )
            result.scripted_refusals = imported.refused_as_expected
            _measure(doc, Ticket.objects.get(ticket_id=ticket_id), result, options.outcomes_model)
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
