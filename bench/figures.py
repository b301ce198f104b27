"""The pure arithmetic of `make bench`: medians, ratios, wrk's output, the report and its table."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENDPOINTS: tuple[tuple[str, str], ...] = (
    ("state_get", "state GET"),
    ("context_get", "context GET, 20 turns"),
    ("turn_post", "turn POST (not due)"),
    ("action_post", "action POST"),
)
READS = ("state_get", "context_get")  # against PS; the writes against R'
APPS = ("d", "ps", "p", "r")
# The keys var/bench.json always has (dotted paths into the nested object: `agent_turn.d_over_rprime` is
# data["agent_turn"]["d_over_rprime"]). None when a figure was not measured.
REQUIRED_KEYS = (
    "agent_turn.d_over_rprime",
    "agent_turn.p99_over_rprime",
    "settle.d_over_rprime",
    "action_post.d_over_rprime",
    "state_get.d_over_ps",
    "context_get.d_over_ps",
    "round_trips.state_get",
    "round_trips.context_get",
    "round_trips.turn_post",
    "round_trips.action_post",
    "round_trips.settle",
    "growth.state_2000_over_1",
    "growth.context_2000_actions_over_1",
    "growth.context_50000_over_20",
    "growth.action_2000_over_0",
    "growth.ticket_page_50000_over_20",
    "growth.queue_1m_over_1k",
    "memory.rss_10k_over_start",
)


def letters(n: int) -> str:
    """n in letters between two q's (0 -> qaq, 27 -> qbbq): unique per request and, as an item, kept apart by
    the desk's item identity, which drops order references (`item-mix-999` and `item-mix-119` are both
    `item`), articles (`a`, `my`) and plural endings (`...s`)."""
    out = ""
    while True:
        n, digit = divmod(n, 26)
        out = chr(ord("a") + digit) + out
        if n == 0:
            return f"q{out}q"


def median(values: Iterable[float]) -> float | None:
    """The median, or None when nothing was measured."""
    collected = [v for v in values if v is not None]
    return statistics.median(collected) if collected else None


def mean(values: Iterable[float]) -> float | None:
    collected = [v for v in values if v is not None]
    return statistics.fmean(collected) if collected else None


def percentile(values: Iterable[float], pct: float) -> float | None:
    """The nearest-rank percentile (p50, p99) of what was measured, or None for nothing."""
    collected = sorted(v for v in values if v is not None)
    if not collected:
        return None
    rank = max(1, math.ceil(pct / 100 * len(collected)))
    return collected[min(rank, len(collected)) - 1]


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    """numerator / denominator rounded, or None when either is missing or the denominator is zero."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return round(numerator / denominator, digits)


@dataclass(frozen=True)
class LoadResult:
    """One fixed-duration load run: throughput, median latency, and the answers that were not 2xx/3xx."""

    requests: int
    seconds: float
    p50_ms: float | None
    errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _duration_ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS_MS[match.group(2)]


def parse_wrk(output: str) -> LoadResult:
    """wrk's summary (run with --latency): requests, duration, the 50% latency, non-2xx/3xx and socket errors."""
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m),", output)
    if done is None:
        raise ValueError("wrk printed no request count:\n" + output)
    seconds = _duration_ms(done.group(2) + done.group(3)) / 1000
    p50 = re.search(r"^\s*50%\s+(\S+)", output, re.MULTILINE)
    errors = 0
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non_2xx:
        errors += int(non_2xx.group(1))
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if sockets:
        errors += sum(int(n) for n in sockets.groups())
    return LoadResult(
        requests=int(done.group(1)),
        seconds=seconds,
        p50_ms=_duration_ms(p50.group(1)) if p50 else None,
        errors=errors,
    )


def throughput_summary(runs: Mapping[str, Mapping[str, Sequence[LoadResult]]]) -> dict[str, Any]:
    """Per endpoint: each app's median requests/s and p50 over the rounds, the ratios, and the errors seen:
    reads D/PS (and D/R, D/P), writes D/R' (the raw app's writes are R') and D/P.

    `runs[endpoint][app]` lists one LoadResult per round. A ratio is of throughputs: 1.0 means as fast.
    """
    out: dict[str, Any] = {}
    for endpoint, by_app in runs.items():
        row: dict[str, Any] = {}
        for app, results in by_app.items():
            row[f"{app}_rps"] = _rounded(median(r.rps for r in results), 1)
            row[f"{app}_p50_ms"] = _rounded(median(r.p50_ms for r in results if r.p50_ms is not None), 2)
            row[f"{app}_errors"] = sum(r.errors for r in results)
        row["d_over_p"] = ratio(row.get("d_rps"), row.get("p_rps"))
        if endpoint in READS:
            row["d_over_ps"] = ratio(row.get("d_rps"), row.get("ps_rps"))
            row["d_over_r"] = ratio(row.get("d_rps"), row.get("r_rps"))
        else:  # the raw app's writes are R', the desk's own statements
            row["d_over_rprime"] = ratio(row.get("d_rps"), row.get("r_rps"))
        out[endpoint] = row
    return out


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def growth_ratio(small: Sequence[float], large: Sequence[float]) -> float | None:
    """How much slower the large case is than the small one: median(large) / median(small)."""
    return ratio(median(large), median(small))


def report(
    *,
    throughput: Mapping[str, Any],
    sections: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The object written to var/bench.json, nested: every REQUIRED_KEYS path exists (None when not measured).

    `throughput` is throughput_summary's rows; `sections` the other measured groups (agent_turn, settle,
    round_trips, growth, memory, ...), merged over the endpoints' rows of the same name."""
    out: dict[str, Any] = {name: dict(row) for name, row in throughput.items()}
    for name, values in sections.items():
        out.setdefault(name, {}).update(values)
    for key in REQUIRED_KEYS:
        section, name = key.split(".", 1)
        out.setdefault(section, {}).setdefault(name, None)
    for key, value in (extra or {}).items():
        out[key] = value
    return out


def lookup(data: Mapping[str, Any], dotted: str) -> Any:
    """data["a"]["b"] for "a.b"; KeyError when a part is missing."""
    value: Any = data
    for part in dotted.split("."):
        value = value[part]
    return value


def missing_keys(data: Mapping[str, Any]) -> list[str]:
    missing = []
    for key in REQUIRED_KEYS:
        try:
            lookup(data, key)
        except (KeyError, TypeError):
            missing.append(key)
    return missing


def unmeasured(data: Mapping[str, Any]) -> list[str]:
    """The required keys present but None (not measured in this run)."""
    out = []
    for key in REQUIRED_KEYS:
        try:
            value = lookup(data, key)
        except (KeyError, TypeError):
            continue
        if value is None:
            out.append(key)
    return out


def cell(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}{suffix}" if value < 100 else f"{value:,.0f}{suffix}"
    return f"{value}{suffix}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _with_transaction(queries: Mapping[str, int | None], key: str) -> str | int | None:
    """A request's statements, and the BEGIN/COMMIT around them when it has a transaction (`5 +2 tx`)."""
    count = queries.get(key)
    control = queries.get(f"{key}_transaction")
    return f"{count} +{control} tx" if count is not None and control else count


def throughput_table(summary: Mapping[str, Mapping[str, Any]], queries: Mapping[str, int | None]) -> str:
    """Requests/s per app, the ratios (reads against PS, writes against R'), p50, ORM queries, errors."""
    header = [
        "endpoint",
        "D req/s",
        "PS req/s",
        "P req/s",
        "R/R' req/s",
        "D/PS",
        "D/R'",
        "D/R",
        "D/P",
        "D p50 ms",
        "D ORM queries",
        "errors",
    ]
    rows = []
    for key, label in ENDPOINTS:
        row = summary.get(key)
        if row is None:
            continue
        errors = sum(row.get(f"{app}_errors", 0) or 0 for app in APPS)
        rows.append(
            [
                label,
                row.get("d_rps"),
                row.get("ps_rps"),
                row.get("p_rps"),
                row.get("r_rps"),
                row.get("d_over_ps"),
                row.get("d_over_rprime"),
                row.get("d_over_r"),
                row.get("d_over_p"),
                row.get("d_p50_ms"),
                _with_transaction(queries, key),
                errors,
            ]
        )
    return markdown_table(header, rows)
