"""The eval's options, its per-ticket results and the report they add up to (no database here).

`evals.runner` fills a `TicketResult` per ticket; `EvalReport` aggregates them per category, per domain and for
the money; `evals.table` prints it and `compaction_eval --json` dumps it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from core.cost import TicketCost, summed
from core.state import MONEY_TOTALS
from core.vocabulary import CompactionStatus
from evals.baseline import ModelBaselineUsage
from evals.facts import CATEGORIES, FactCheck
from evals.false_misses import false_miss_figures
from evals.outcomes import Outcomes

IMMEDIATE_TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DEFAULT_MODELS = {"extractive": "extractive-v1", "openai": "gpt-4.1-mini"}


@dataclass(frozen=True)
class EvalOptions:
    summarizer: str = "extractive"
    model: str | None = None
    budget: int | None = None  # None: each ticket's own class budget
    # The working model asked the outcome questions (evals/outcomes.py), through OPENAI_BASE_URL; None: not asked.
    outcomes_model: str | None = None
    # The summary-only baseline beside `first-sentence` (always measured): `model` also has the summarizer's
    # model write a rolling summary at each cut (evals/baseline.py), through the same endpoint.
    baseline: str = "first-sentence"
    limit: int | None = None  # at most this many tickets from each PATH (the command applies it)

    @property
    def summarizer_model(self) -> str:
        return self.model or DEFAULT_MODELS.get(self.summarizer, self.summarizer)

    @property
    def baseline_model(self) -> str | None:
        """The model that writes the `model` baseline: the summarizer's (None for the extractive one)."""
        return self.model or (self.summarizer_model if self.summarizer != "extractive" else None)


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
    "model_baseline_summary_due",
    "model_baseline_in_summary",
    "model_baseline_in_context",
    "model_baseline_in_context_of_transcript",
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
    tokens_model_baseline_context: int | None = None  # None: the model baseline did not run
    model_baseline: ModelBaselineUsage | None = None
    # The end of the ticket: is the request over the budget, and could a compaction still have cut it?
    ended_over_budget: bool = False
    safe_cut_at_end: bool = False
    events_tokens_before: int = 0
    events_tokens_after: int = 0
    engine_coverage_misses: int = 0
    # Per replacing compaction: its coverage report, summary and pinned state (evals/false_misses.py).
    coverage_events: list[dict[str, Any]] = field(default_factory=list)
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
                "model_baseline_summary_due": sum(c.model_baseline_summary is not None for c in checks),
                "model_baseline_in_summary": sum(bool(c.model_baseline_summary) for c in checks),
                "model_baseline_in_context": sum(bool(c.model_baseline_context) for c in checks),
                "model_baseline_in_context_of_transcript": sum(
                    bool(c.model_baseline_context and c.in_transcript) for c in checks
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
                "model_baseline_context": self.tokens_model_baseline_context,
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
            "model_baseline": self.model_baseline.as_json() if self.model_baseline else None,
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
            "model_baseline_context": sum(t.tokens_model_baseline_context or 0 for t in tickets),
            "compaction_events_before": sum(t.events_tokens_before for t in tickets),
            "compaction_events_after": sum(t.events_tokens_after for t in tickets),
        },
        "summarizer_cost_usd": str(sum((t.summarizer_cost_usd for t in tickets), Decimal(0))),
        "engine_coverage_misses": sum(t.engine_coverage_misses for t in tickets),
        "false_misses": false_miss_figures(e for t in tickets for e in t.coverage_events),
        "model_baseline": {
            key: sum(t.model_baseline.as_json()[key] for t in tickets if t.model_baseline)
            for key in ("calls", "failures", "input_tokens", "output_tokens", "latency_ms")
        },
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
            # Which rolling summary the `baseline` context carries (the model's when it ran).
            "baseline_kind": self.options.baseline,
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
            "baseline": self.options.baseline,
            "limit": self.options.limit,
            "seconds": round(self.seconds, 2),
            "totals": self.totals(),
            "files": self.by_file(),
            "domains": self.by_domain(),
            "problems": self.problems(),
            "cost": self.cost(),
            "outcomes": self.outcomes(),
            "tickets": [t.as_json() for t in self.tickets],
        }
