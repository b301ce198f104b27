"""The eval report as text: one row per ticket, then the totals. Plain text, no dependencies."""

from __future__ import annotations

from typing import Any

from evals.facts import CATEGORIES
from evals.runner import EvalReport, TicketResult

CATEGORY_NAMES = {
    "actions_taken": "irreversible actions",
    "customer_constraints": "customer constraints",
    "open_questions": "open questions",
}
SHORT = {"actions_taken": "actions", "customer_constraints": "constraints", "open_questions": "questions"}


def _fraction(found: int, total: int) -> str:
    return f"{found}/{total}" if total else "-"


def _percent(found: int, total: int) -> str:
    return f"{found}/{total} ({100 * found / total:.1f}%)" if total else "none"


def _category_cell(counts: dict[str, int]) -> str:
    if not counts["total"]:
        return "-"
    summary = _fraction(counts["in_summary"], counts["summary_due"]) if counts["summary_due"] else "n/a"
    return f"{counts['in_state']}|{summary}|{counts['in_context']} of {counts['total']}"


def _compactions(compactions: dict[str, int]) -> str:
    return "/".join(str(compactions.get(s, 0)) for s in ("applied", "deferred", "failed"))


def _row(result: TicketResult) -> list[str]:
    if result.error:
        return [result.ticket_id, str(result.turns), "ERROR: " + result.error]
    retention = result.retention()
    return [
        result.ticket_id,
        str(result.turns),
        _compactions(result.compactions),
        f"{result.tokens_uncompacted:,}",
        f"{result.tokens_context:,}",
        f"{result.tokens_saved:,}",
        *(_category_cell(retention[c]) for c in CATEGORIES),
        _fraction(result.probes_refused, len(result.probes)),
        "ok" if result.ok else "LOST",
    ]


HEADER = [
    "ticket",
    "turns",
    "compact a/d/f",
    "uncompacted",
    "context",
    "saved",
    *(f"{SHORT[c]} st|sum|ctx" for c in CATEGORIES),
    "probes",
    "",
]
RIGHT = {1, 3, 4, 5}


def render_rows(report: EvalReport) -> list[str]:
    rows = [HEADER] + [_row(t) for t in report.tickets]
    widths = [
        max(len(r[i]) for r in rows if i < len(r) and len(r) == len(HEADER)) for i in range(len(HEADER))
    ]
    lines = []
    for row in rows:
        if len(row) != len(HEADER):
            lines.append("  ".join(row))
            continue
        cells = [cell.rjust(widths[i]) if i in RIGHT else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "-" * len(lines[0]))
    return lines


def render_totals(report: EvalReport) -> list[str]:
    totals: dict[str, Any] = report.totals()
    comp = totals["compactions"]
    tokens = totals["tokens"]
    lines = [
        f"{totals['tickets']} tickets, {totals['turns']:,} turns, {totals['errors']} import errors; "
        f"summarizer {report.options.summarizer} ({report.options.summarizer_model}), "
        f"budget {report.options.budget or 'per ticket class'}",
        f"compactions: {comp.get('applied', 0)} applied, {comp.get('deferred', 0)} deferred, "
        f"{comp.get('failed', 0)} failed; {totals['tickets_compacted']} of {totals['tickets']} tickets compacted",
        f"tokens: {tokens['uncompacted']:,} uncompacted -> {tokens['context']:,} in the context after compaction: "
        f"{tokens['saved']:,} saved ({100 * tokens['saved_share']:.1f}%)",
        "",
        f"{'fact retention':<22}{'pinned state':<22}{'summary (when due)':<22}{'context after compaction':<27}"
        "kept only by the pinned state",
    ]
    for category in CATEGORIES:
        r = totals["retention"][category]
        lines.append(
            f"{CATEGORY_NAMES[category]:<22}{_percent(r['in_state'], r['total']):<22}"
            f"{_percent(r['in_summary'], r['summary_due']):<22}{_percent(r['in_context'], r['total']):<27}"
            f"{r['only_in_pinned_state'] if r['total'] else ''}".rstrip()
        )
    probes = totals["probes"]
    money = totals["refunded_cents"]
    lines += [
        "",
        f"repeat probes refused: {_percent(probes['refused'], probes['total'])}; "
        f"scripted repeats refused on import: {totals['scripted_refusals']}",
        f"refunded cents: {money['expected']:,} in the transcripts, {money['state']:,} in the pinned states",
        f"summarizer cost: ${totals['summarizer_cost_usd']}; coverage misses flagged by the engine: "
        f"{totals['engine_coverage_misses']}",
    ]
    misses = render_misses(report)
    if misses:
        lines += [
            "",
            "missing (summary misses are measured; only state or context misses fail --check):",
            *misses,
        ]
    lines += ["", "OK: nothing lost from the pinned state or the context" if report.ok else "LOST: see above"]
    return lines


def render_misses(report: EvalReport) -> list[str]:
    """Each fact missing somewhere, and each probe the desk let through."""
    lines = []
    for result in report.tickets:
        for check in result.facts:
            where = [
                name
                for name, found in (
                    ("state", check.state),
                    ("summary", check.summary),
                    ("context", check.context),
                )
                if found is False
            ]
            if where:
                lines.append(
                    f"  {result.ticket_id}: {SHORT[check.fact.category]} {check.fact.label!r}: "
                    f"missing from the {', '.join(where)}"
                )
        for probe in result.probes:
            if not probe.refused:
                lines.append(f"  {result.ticket_id}: a repeat {probe.tool} on {probe.item} was NOT refused")
        if result.refunded_cents_expected != result.refunded_cents_state:
            lines.append(
                f"  {result.ticket_id}: refunded {result.refunded_cents_expected} cents in the transcript, "
                f"{result.refunded_cents_state} in the pinned state"
            )
    return lines


def render(report: EvalReport) -> str:
    return "\n".join([*render_rows(report), "", *render_totals(report)]) + "\n"
