"""The `make bench` run: fixtures, servers, interleaved load rounds, query counts, growth, the report.

Everything runs against one scratch database (flushed first): the desk and the plain views under one gunicorn
(bench.wsgi, 2 sync workers), the raw app under another, both with the production settings. Fixtures that are
not what is measured are inserted with bulk_create; the ones whose shape matters (T-40118, 300 actions) go
through the services once and are copied row by row.

This module is the order of the run and its Markdown report; the parts live beside it: bench/fixtures.py
(the scratch data), bench/servers.py (gunicorn on loopback), bench/measure.py (plans, query counts, load
rounds, growth), bench/load.py and bench/figures.py (the load generator and the statistics).
"""

from __future__ import annotations

import json
import os
import platform
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection

from bench import figures
from bench.fixtures import Log, build_fixtures
from bench.load import have_wrk
from bench.measure import Options, count_queries, growth, throughput, tokenize_speed
from bench.servers import raw_dsn, server_env, servers

# Connection settings compared in the "connections" section (environment of the desk's server).
CONNECTION_MODES: dict[str, dict[str, str]] = {
    "per_request": {"DATABASE_CONN_MAX_AGE": "0", "DATABASE_POOL": "0"},
    "persistent": {"DATABASE_CONN_MAX_AGE": "600", "DATABASE_CONN_HEALTH_CHECKS": "1", "DATABASE_POOL": "0"},
    "pool": {"DATABASE_POOL": "1"},
}


def run(options: Options, log: Log) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        raise RuntimeError(
            "make bench measures on PostgreSQL: set DATABASE_URL (BENCH_DATABASE_URL) to postgres://..."
        )
    began = time.monotonic()
    log(
        f"load: {'wrk' if have_wrk() else 'the Python load generator (wrk not installed)'}, "
        f"{options.connections} connections, {options.rounds} rounds of {options.seconds:g}s per cell"
    )
    fixtures, state_tokens = build_fixtures(log)
    log("counting queries per request")
    queries = count_queries(fixtures)
    tokenize = tokenize_speed()
    connection.close()  # the servers and this process share the database; hold nothing open meanwhile

    desk_env = server_env({})
    raw_env = server_env({"BENCH_RAW_DSN": raw_dsn()})
    log("starting gunicorn (2 sync workers each): desk + plain views, raw WSGI app")
    with servers({"d": ("bench.wsgi", desk_env), "r": ("bench.raw_app:app", raw_env)}) as started:
        ports = {"d": started["d"].port, "p": started["d"].port, "r": started["r"].port}
        runs = throughput(fixtures, ports, options, log, tuple(k for k, _ in figures.ENDPOINTS), "main")
        growth_figures, growth_detail = growth(fixtures, started["d"].port, options, log)
    summary = figures.throughput_summary(runs)

    connections: dict[str, Any] = {}
    if options.connection_modes:
        log("connections: one desk server per setting, the same rounds interleaved")
        specs = {f"m_{mode}": ("bench.wsgi", server_env(env)) for mode, env in CONNECTION_MODES.items()}
        with servers(specs) as started:
            mode_ports = {name: server.port for name, server in started.items()}
            mode_runs = throughput(
                fixtures,
                mode_ports,
                options,
                log,
                ("state_get", "context_get", "turn_post", "action_post"),
                "conn",
            )
        for endpoint, by_mode in mode_runs.items():
            connections[endpoint] = {
                name.removeprefix("m_"): round(figures.median(r.rps for r in results) or 0, 1)
                for name, results in by_mode.items()
            }

    result = figures.report(
        throughput=summary,
        queries=queries,
        growth=growth_figures,
        extra={
            "growth_detail": growth_detail,
            "connections": connections,
            "tokenize": tokenize,
            "state_tokens": state_tokens,
            "meta": {
                "date": datetime.now(UTC).date().isoformat(),
                "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
                "database": _server_version(),
                "load": "wrk" if have_wrk() else "python",
                "seconds_per_cell": options.seconds,
                "rounds": options.rounds,
                "connections": options.connections,
                "production_connections": "persistent" if not settings.DATABASE_POOL else "pool",
                "elapsed_seconds": round(time.monotonic() - began),
            },
        },
    )
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(result, indent=2) + "\n")
    return result


def _server_version() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        row = cursor.fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


def render(result: dict[str, Any]) -> str:
    """The tables `make bench` prints."""
    queries = result["queries"]
    lines = ["", "Throughput (median of the rounds; D/P and D/R are ratios of requests per second):", ""]
    lines.append(figures.throughput_table(result, queries))
    growth = result["growth"]
    detail = result["growth_detail"]
    lines += ["", "Growth (one client, median ms; ratio = large / small):", ""]
    rows = [
        [
            "context GET, 20 -> 5,000 turns",
            detail.get("context_20_ms"),
            detail.get("context_5000_ms"),
            growth["context_5000_over_20"],
        ],
        [
            "action POST, 0 -> 300 actions",
            detail.get("action_0_ms"),
            detail.get("action_300_ms"),
            growth["action_300_over_0"],
        ],
        [
            "ticket page, 20 -> 5,000 turns",
            detail.get("ticket_page_20_ms"),
            detail.get("ticket_page_5000_ms"),
            growth["ticket_page_5000_over_20"],
        ],
    ]
    for name, r in detail.get("queue_ratios", {}).items():
        big = [
            k
            for k in detail
            if k.startswith("queue_") and k.endswith(f"_{name}_ms") and not k.startswith("queue_1000_")
        ]
        rows.append(
            [
                f"queue page ({name}), 1k -> 100k tickets",
                detail.get(f"queue_1000_{name}_ms"),
                detail.get(big[0]) if big else None,
                r,
            ]
        )
    lines.append(figures.markdown_table(["case", "small ms", "large ms", "ratio"], rows))
    if result.get("connections"):
        lines += ["", "Desk requests/s by connection setting (median of the rounds):", ""]
        modes = list(CONNECTION_MODES)
        lines.append(
            figures.markdown_table(
                ["endpoint", *modes],
                [
                    [endpoint, *(by_mode.get(m) for m in modes)]
                    for endpoint, by_mode in result["connections"].items()
                ],
            )
        )
    tokens = result["tokenize"]
    state = result["state_tokens"]["t40118"]
    lines += [
        "",
        f"tokenize: {tokens['tokens_per_second']:,} tokens/s on a loaded encoding (loading it: {tokens['encoding_load_ms']} ms)",
        f"T-40118 pinned state per turn: {state['full_state_tokens']} tokens with every field, "
        f"{state['agent_state_tokens']} as the agent gets it ({state['saved_per_turn']} saved)",
        f"{result['meta']['date']}, {result['meta']['machine']}, {result['meta']['database']}, "
        f"{result['meta']['elapsed_seconds']}s",
    ]
    return "\n".join(lines)
