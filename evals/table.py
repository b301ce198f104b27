"""The eval report as text: one screen by default (files, domains, facts, money, verdict), tickets on request.

Plain text, no dependencies. `--json` carries every figure; this is the part a person reads.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from evals.facts import CATEGORIES
from evals.false_misses import render_false_misses
from evals.results import EvalReport

CATEGORY_NAMES = {
    "actions_taken": "irreversible actions",
    "customer_constraints": "customer constraints",
    "open_questions": "open questions",
}
SHORT = {"actions_taken": "actions", "customer_constraints": "constraints", "open_questions": "questions"}
MAX_PROBLEM_LINES = 12


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)]
        return "  ".join(cells).rstrip()

    out = [line(header)]
    out.append("-" * len(out[0]))
    return out + [line(r) for r in rows]


def _fraction(found: int, total: int) -> str:
    return f"{found}/{total}" if total else "-"


def _percent(found: int, total: int) -> str:
    return f"{found}/{total} ({100 * found / total:.0f}%)" if total else "-"


def _dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _money(money: dict[str, int]) -> str:
    """One total: the independent figure / the pinned states (over the tickets with an independent figure)."""
    mark = f" MISMATCH x{money['tickets_differing']}" if money["tickets_differing"] else ""
    return f"{_dollars(money['independent'])} / {_dollars(money['state_of_checked'])}{mark}"


def _short_name(name: str, width: int = 44) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def render_files(report: EvalReport) -> list[str]:
    """Per file: over budget, forced and over-budget events, compactions that did not shrink, tokens saved."""
    rows = []
    for name, figures in report.by_file().items():
        comp = figures["compactions"]
        tokens = figures["tokens"]
        rows.append(
            [
                _short_name(name),
                str(figures["tickets"]),
                str(comp["applied"]),
                str(comp["forced"]),
                str(comp["over_budget"]),
                str(comp["failed"]),
                f"{figures['tickets_ended_over_budget']} ({figures['tickets_over_budget_with_safe_cut']})",
                str(figures["compactions_not_shrinking"]),
                f"{tokens['saved']:,} ({100 * tokens['saved_share']:.0f}%)",
                "ok" if figures["ok"] else f"{figures['problems']} problem(s)",
            ]
        )
    header = [
        "file",
        "tickets",
        "applied",
        "forced",
        "over_budget",
        "failed",
        "ended over budget (safe cut)",
        "not shrinking",
        "tokens saved",
        "",
    ]
    return _table(header, rows, right={1, 2, 3, 4, 5, 6, 7, 8})


def _kept(retention: dict[str, dict[str, int]], key: str) -> str:
    found = sum(r[key] for r in retention.values())
    total = sum(r["total"] for r in retention.values())
    return _fraction(found, total)


def render_domains(report: EvalReport) -> list[str]:
    """Per domain: compaction, the facts kept with and without the pinned state, and the money moved."""
    rows = []
    for name, figures in report.by_domain().items():
        retention = figures["retention"]
        money = figures["money"]
        rows.append(
            [
                name,
                str(figures["tickets"]),
                f"{figures['tickets_compacted']}",
                f"{figures['tokens']['saved']:,}",
                _kept(retention, "in_state"),
                _kept(retention, "in_context_without_state"),
                _kept(retention, "baseline_in_context"),
                _money(money["refunded_cents_total"]),
                _money(money["charged_cents_total"]),
                _money(money["credited_cents_total"]),
                f"{money['tickets_checked']}/{figures['tickets']}",
            ]
        )
    model = report.options.baseline == "model"
    if model:
        for row, figures in zip(rows, report.by_domain().values(), strict=True):
            row.insert(7, _kept(figures["retention"], "model_baseline_in_context"))
    header = [
        "domain",
        "tickets",
        "compacted",
        "saved",
        "facts in state",
        "ctx w/o state",
        "first-sentence baseline ctx",
        *(["model baseline ctx"] if model else []),
        "refunded: replay / state",
        "charged: replay / state",
        "credited: replay / state",
        "money checked",
    ]
    return _table(header, rows, right={1, 2, 3, 4, 5, 6, *([7] if model else [])})


def render_retention(report: EvalReport) -> list[str]:
    """Fact by fact, where each kind is kept: the state, the summaries, the contexts without the state."""
    totals: dict[str, Any] = report.totals()
    copied = " (copied from the state)" if report.options.summarizer == "extractive" else ""
    header = [
        "facts",
        "kept in state",
        f"desk summary{copied}",
        "desk ctx w/o pinned state",
        "in transcript",
        "first-sentence baseline summary",
        "first-sentence baseline ctx (of transcript's)",
        "kept only by state (vs first-sentence)",
    ]
    model = report.options.baseline == "model"
    if model:
        header += ["model baseline summary", "model baseline ctx (of transcript's)"]
    rows = []
    for category in CATEGORIES:
        r = totals["retention"][category]
        rows.append(
            [
                CATEGORY_NAMES[category],
                _percent(r["in_state"], r["total"]),
                _percent(r["in_summary"], r["summary_due"]),
                _percent(r["in_context_without_state"], r["total"]),
                _percent(r["in_transcript"], r["total"]),
                _percent(r["baseline_in_summary"], r["baseline_summary_due"]),
                _percent(r["baseline_in_context_of_transcript"], r["in_transcript"]),
                str(r["in_state"] - r["baseline_in_context"]) if r["total"] else "-",
            ]
        )
        if model:
            rows[-1] += [
                _percent(r["model_baseline_in_summary"], r["model_baseline_summary_due"]),
                _percent(r["model_baseline_in_context_of_transcript"], r["in_transcript"]),
            ]
    return _table(header, rows, right=set())


def render_rows(report: EvalReport) -> list[str]:
    """One row per ticket (`--tickets`)."""
    rows = []
    for result in report.tickets:
        if result.error:
            rows.append([result.ticket_id, str(result.turns), "ERROR: " + result.error[:80], *[""] * 7])
            continue
        retention = result.retention()
        comp = result.compactions
        rows.append(
            [
                result.ticket_id,
                str(result.turns),
                "/".join(str(comp.get(s, 0)) for s in ("applied", "forced", "over_budget", "failed")),
                f"{result.tokens_context:,}/{result.budget:,}",
                f"{result.tokens_saved:,}",
                *(_cell(retention[c]) for c in CATEGORIES),
                _fraction(result.probes_refused, len(result.probes)),
                "ok" if result.ok else "PROBLEM",
            ]
        )
    header = [
        "ticket",
        "turns",
        "a/f/ob/fail",
        "context/budget",
        "saved",
        *(f"{SHORT[c]} st|ctx-st|base" for c in CATEGORIES),
        "probes",
        "",
    ]
    return _table(header, rows, right={1, 3, 4})


def _cell(counts: dict[str, int]) -> str:
    if not counts["total"]:
        return "-"
    return (
        f"{counts['in_state']}|{counts['in_context_without_state']}|{counts['baseline_in_context']}"
        f" of {counts['total']}"
    )


def render_totals(report: EvalReport) -> list[str]:
    totals: dict[str, Any] = report.totals()
    comp = totals["compactions"]
    tokens = totals["tokens"]
    probes = totals["probes"]
    money = totals["money"]
    return [
        f"{totals['tickets']} tickets, {totals['turns']:,} turns, {totals['errors']} import errors; summarizer "
        f"{report.options.summarizer} ({report.options.summarizer_model}); baselines (summary-only, no pinned "
        "state): first-sentence (constructed, extractive)"
        + (
            f", model (a rolling summary written by {report.options.baseline_model}: "
            f"{totals['model_baseline']['calls']} calls, {totals['model_baseline']['failures']} failed)"
            if report.options.baseline == "model"
            else ""
        ),
        f"compactions: {comp['applied']} applied, {comp['forced']} forced, {comp['over_budget']} over budget, "
        f"{comp['failed']} failed, {comp['deferred']} deferred; {totals['tickets_compacted']} tickets compacted",
        f"ended over budget: {totals['tickets_ended_over_budget']} "
        f"({totals['tickets_over_budget_with_safe_cut']} with a safe cut); "
        f"compactions that did not shrink the request: {totals['compactions_not_shrinking']}",
        f"tokens: {tokens['uncompacted']:,} uncompacted -> {tokens['context']:,} with compaction "
        f"({tokens['saved']:,} saved, {100 * tokens['saved_share']:.1f}%); baseline requests "
        f"{tokens['baseline_context']:,} (first-sentence)"
        + (f", {tokens['model_baseline_context']:,} (model)" if report.options.baseline == "model" else ""),
        f"customer briefs (the oracle, reported apart; only what a customer turn states is pinned): "
        f"{totals['brief']['stated_in_conversation']} of {totals['brief']['sentences']} sentences stated in the conversation",
        f"repeat probes refused: {_percent(probes['refused'], probes['total'])}; money (independent replay / "
        f"pinned states, {money['tickets_checked']} tickets checked): refunded {_money(money['refunded_cents_total'])}, "
        f"charged {_money(money['charged_cents_total'])}, credited {_money(money['credited_cents_total'])}",
    ]


def render_problems(report: EvalReport) -> list[str]:
    problems = report.problems()
    if not problems:
        return ["OK: nothing over budget with a safe cut, every compaction shrank the request, nothing lost"]
    shown = [f"  {p}" for p in problems[:MAX_PROBLEM_LINES]]
    more = len(problems) - MAX_PROBLEM_LINES
    return [
        f"PROBLEMS ({len(problems)}):",
        *shown,
        *([f"  ... and {more} more (see --json)"] if more > 0 else []),
    ]


def render_cost(report: EvalReport) -> list[str]:
    """Per domain and in all: what the compactions cost, what they saved, one compaction against one turn."""
    cost = report.cost()
    rows = []
    for name, figures in [*cost["by_domain"].items(), ("all", cost)]:
        ratio = figures["compaction_to_turn_ratio"]
        rows.append(
            [
                name,
                str(figures["compactions"]),
                f"{figures['summarizer_input_tokens']:,} / {figures['summarizer_output_tokens']:,}",
                f"{figures['summarizer_latency_ms'] / 1000:,.1f} s",
                f"${Decimal(figures['summarizer_cost_usd']):.4f}",
                f"{figures['tokens_not_resent']:,}",
                f"${Decimal(figures['savings_usd']):.4f}",
                "n/a"
                if ratio is None
                else f"{ratio:.4f} (1/{1 / ratio:,.0f})"
                if ratio
                else "0 (no model call)",
            ]
        )
    header = [
        "cost and savings",
        "compactions",
        "summarizer tokens in / out",
        "latency",
        "summarizer cost",
        "tokens not re-sent",
        "working input saved",
        "compaction / working turn",
    ]
    return _table(header, rows, right={1, 2, 3, 4, 5, 6})


def render_outcomes(report: EvalReport) -> list[str]:
    """Per context: the decision questions' agreement with the truth and with the full context, repeats."""
    outcomes = report.outcomes()
    if "skipped" in outcomes:
        return [f"outcomes: skipped ({outcomes['skipped']})"]
    rows = []
    for name in ("full", "desk", "baseline"):
        figures = outcomes[name]
        rows.append(
            [
                name,
                str(figures["asked"]),
                "n/a"
                if figures["agreement_with_truth"] is None
                else f"{100 * figures['agreement_with_truth']:.0f}%",
                "n/a"
                if figures["agreement_with_full"] is None
                else f"{100 * figures['agreement_with_full']:.0f}%",
                str(figures["repeat_irreversible_attempted"]),
                str(figures["unanswered"]),
            ]
        )
    header = [
        f"outcomes ({outcomes['model']}; a floor; baseline = {outcomes['baseline_kind']})",
        "asked",
        "right",
        "agrees with full",
        "repeats attempted",
        "unanswered",
    ]
    return _table(header, rows, right={1, 2, 3, 4, 5})


def render(report: EvalReport, *, tickets: bool = False) -> str:
    parts = [*render_files(report), "", *render_false_misses(report.by_file()), ""]
    parts += [*render_domains(report), "", *render_retention(report), ""]
    parts += [*render_cost(report), "", *render_outcomes(report), ""]
    if tickets:
        parts += [*render_rows(report), ""]
    parts += [*render_totals(report), "", *render_problems(report)]
    return "\n".join(parts) + "\n"
