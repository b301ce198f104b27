"""The pure arithmetic of `make bench`: medians, ratios, wrk's output, the report and its table."""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENDPOINTS: tuple[tuple[str, str], ...] = (
    ("state_get", "state GET"),
    ("context_get", "context GET, 20 turns"),
    ("context_get_5000", "context GET, 5,000 turns"),
    ("turn_post", "turn POST (not due)"),
    ("action_post", "action POST"),
)
APPS = ("d", "p", "r")
# The keys var/bench.json always has (dotted paths into the nested object).
REQUIRED_KEYS = (
    "state_get.d_over_p",
    "context_get.d_over_p",
    "turn_post.d_over_p",
    "action_post.d_over_p",
    "queries.state_get",
    "queries.context_get",
    "queries.turn_post",
    "queries.action_post",
    "growth.context_5000_over_20",
    "growth.action_300_over_0",
    "growth.ticket_page_5000_over_20",
    "growth.queue_100k_over_1k",
)


def median(values: Iterable[float]) -> float | None:
    """The median, or None when nothing was measured."""
    collected = [v for v in values if v is not None]
    return statistics.median(collected) if collected else None


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
    """Per endpoint: each app's median requests/s and p50 over the rounds, D/P and D/R, and the errors seen.

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
        row["d_over_r"] = ratio(row.get("d_rps"), row.get("r_rps"))
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
    queries: Mapping[str, int | None],
    growth: Mapping[str, float | None],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The object written to var/bench.json: every REQUIRED_KEYS path exists (None when not measured)."""
    out: dict[str, Any] = {name: dict(row) for name, row in throughput.items()}
    for endpoint in ("state_get", "context_get", "turn_post", "action_post"):
        out.setdefault(endpoint, {}).setdefault("d_over_p", None)
    out["queries"] = {
        name: queries.get(name) for name in ("state_get", "context_get", "turn_post", "action_post")
    }
    out["queries"].update({k: v for k, v in queries.items() if k not in out["queries"]})
    out["growth"] = {
        name: growth.get(name)
        for name in (
            "context_5000_over_20",
            "action_300_over_0",
            "ticket_page_5000_over_20",
            "queue_100k_over_1k",
        )
    }
    out["growth"].update({k: v for k, v in growth.items() if k not in out["growth"]})
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


def _cell(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}{suffix}" if value < 100 else f"{value:,.0f}{suffix}"
    return f"{value}{suffix}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _with_transaction(queries: Mapping[str, int | None], key: str) -> str | int | None:
    """A request's statements, and the BEGIN/COMMIT around them when it has a transaction (`5 +2 tx`)."""
    count = queries.get(key)
    control = queries.get(f"{key}_transaction")
    return f"{count} +{control} tx" if count is not None and control else count


def throughput_table(summary: Mapping[str, Mapping[str, Any]], queries: Mapping[str, int | None]) -> str:
    header = [
        "endpoint",
        "D req/s",
        "P req/s",
        "R req/s",
        "D/P",
        "D/R",
        "D p50 ms",
        "D queries",
        "P queries",
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
                row.get("p_rps"),
                row.get("r_rps"),
                row.get("d_over_p"),
                row.get("d_over_r"),
                row.get("d_p50_ms"),
                _with_transaction(queries, key),
                _with_transaction(queries, f"p_{key}"),
                errors,
            ]
        )
    return markdown_table(header, rows)
