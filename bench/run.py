"""The `make bench` run: fixtures, round trips on the wire, interleaved load rounds, the whole agent turn,
memory, growth, the report.

Everything runs against one scratch database (flushed first): the desk (D), PS and P under one gunicorn
(bench.wsgi, 2 sync workers), the raw app (R for the reads, R' for the writes) under another, both with the
production settings. Reads are compared with PS, writes with R'. Fixtures that are not what is measured are
inserted with bulk_create or SQL; the ones whose shape matters go through the services.

This module is the order of the run and its report; the parts live beside it: bench/fixtures.py and
bench/queue_fill.py (the scratch data), bench/servers.py (gunicorn on loopback), bench/wire.py (the round-trip
counter), bench/measure.py (plans, query counts, load rounds), bench/agents.py (the whole turn, the mixed
requests), bench/growth.py, bench/load.py and bench/figures.py (the load generator and the statistics).
"""

from __future__ import annotations

import json
import os
import platform
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import connection

from bench import compaction_due, figures
from bench.agents import AgentRun, run_agents, run_mixed
from bench.fixtures import TURN_TEXT, Fixtures, Log, build_fixtures
from bench.growth import growth
from bench.load import have_wrk
from bench.measure import Options, count_queries, round_trips, throughput, tokenize_speed
from bench.servers import free_port, raw_dsn, server_env, servers, worker_rss_kb
from bench.wire import WireCounter

# Connection settings compared in the optional "connections" section (environment of the desk's server).
CONNECTION_MODES: dict[str, dict[str, str]] = {
    "per_request": {"DATABASE_CONN_MAX_AGE": "0", "DATABASE_POOL": "0"},
    "persistent": {"DATABASE_CONN_MAX_AGE": "600", "DATABASE_CONN_HEALTH_CHECKS": "1", "DATABASE_POOL": "0"},
    "pool": {"DATABASE_POOL": "1"},
}
THROUGHPUT_ENDPOINTS = tuple(k for k, _ in figures.ENDPOINTS)


def run(options: Options, log: Log) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        raise RuntimeError(
            "make bench measures on PostgreSQL: set DATABASE_URL (BENCH_DATABASE_URL) to postgres://..."
        )
    began = time.monotonic()
    generator = "wrk" if have_wrk() else "the Python load generator (wrk not installed)"
    log(
        f"load: {generator}, {options.connections} connections, {options.rounds} rounds of "
        f"{options.seconds:g}s per cell; the agent turn: asyncio, 16 agents{' (--quick)' if options.quick else ''}"
    )
    fixtures, state_tokens = build_fixtures(log, options.long_turns)
    log("counting ORM queries per request")
    queries = count_queries(fixtures)
    tokenize = tokenize_speed()
    connection.close()  # the servers and this process share the database; hold nothing open meanwhile

    log("round trips on the wire: the desk (1 worker) behind a counting proxy")
    trips = _round_trips(fixtures)

    desk_env = server_env({})
    raw_env = server_env({"BENCH_RAW_DSN": raw_dsn()})
    log("starting gunicorn (2 sync workers each): desk + PS + P, raw WSGI app (R reads, R' writes)")
    with servers({"d": ("bench.wsgi", desk_env), "r": ("bench.raw_app:app", raw_env)}) as started:
        d_port, r_port = started["d"].port, started["r"].port
        ports = {"d": d_port, "ps": d_port, "p": d_port, "r": r_port}
        runs = throughput(fixtures, ports, options, log, THROUGHPUT_ENDPOINTS, "main")
        agent = _agent_turns(fixtures, {"d": d_port, "r": r_port}, options, log)
    summary = figures.throughput_summary(runs)

    log(f"memory: a fresh desk server, {options.mix_requests:,} mixed requests")
    with servers({"d": ("bench.wsgi", desk_env)}) as started:
        memory = _memory(fixtures, started["d"], options)
    due = compaction_due.measure(fixtures, log)
    connection.close()
    with servers({"d": ("bench.wsgi", desk_env)}) as started:
        growth_figures, growth_detail = growth(fixtures, started["d"].port, options, log)

    connections: dict[str, Any] = {}
    if options.connection_modes:
        log("connections: one desk server per setting, the same rounds interleaved")
        specs = {f"m_{mode}": ("bench.wsgi", server_env(env)) for mode, env in CONNECTION_MODES.items()}
        with servers(specs) as started:
            mode_ports = {name: server.port for name, server in started.items()}
            mode_runs = throughput(fixtures, mode_ports, options, log, THROUGHPUT_ENDPOINTS, "conn")
        for endpoint, by_mode in mode_runs.items():
            connections[endpoint] = {
                name.removeprefix("m_"): round(figures.median(r.rps for r in results) or 0, 1)
                for name, results in by_mode.items()
            }

    result = figures.report(
        throughput=summary,
        sections={**agent, "round_trips": trips, "growth": growth_figures, "memory": memory},
        extra={
            "orm_queries": queries,
            "compaction_due": due,
            "growth_detail": growth_detail,
            "connections": connections,
            "tokenize": tokenize,
            "state_tokens": state_tokens,
            "meta": {
                "date": datetime.now(UTC).date().isoformat(),
                "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
                "database": _server_version(),
                "load": "wrk" if have_wrk() else "python",
                "agent_load": "python-asyncio",
                "quick": options.quick,
                "seconds_per_cell": options.seconds,
                "rounds": options.rounds,
                "connections": options.connections,
                "agent_seconds": options.agent_seconds,
                "baselines": {
                    "reads": "PS: plain Django view, the desk's middleware and token check, SQL text",
                    "writes": "R': raw WSGI + psycopg running the desk's own statements (bench/raw_writes.py)",
                },
                "production_connections": "persistent" if not settings.DATABASE_POOL else "pool",
                "elapsed_seconds": round(time.monotonic() - began),
            },
        },
    )
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(result, indent=2) + "\n")
    return result


def _round_trips(fixtures: Fixtures) -> dict[str, Any]:
    db = settings.DATABASES["default"]
    upstream = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    with WireCounter(upstream, port=free_port()) as wire:
        url = urlsplit(os.environ["DATABASE_URL"])
        auth = url.netloc.rpartition("@")[0]
        proxied = urlunsplit(
            url._replace(
                netloc=f"{auth}@127.0.0.1:{wire.port}" if auth else f"127.0.0.1:{wire.port}",
                query="sslmode=disable",
            )
        )
        env = server_env({"DATABASE_URL": proxied})
        with servers({"d": ("bench.wsgi", env)}, workers=1) as started:
            return round_trips(fixtures, started["d"].port, wire)


def _agent_turns(fixtures: Fixtures, ports: dict[str, int], options: Options, log: Log) -> dict[str, Any]:
    """Rounds of the whole turn, D and R' interleaved (the order swapped each round); the figures over all."""
    merged = {app: AgentRun(seconds=0.0) for app in ports}
    for round_number in range(options.rounds):
        order = list(ports) if round_number % 2 == 0 else list(reversed(ports))
        for app in order:
            run = run_agents(
                ports[app],
                fixtures.token,
                fixtures.agent_tickets[app],
                options.agent_seconds,
                f"turn-{round_number}-{app}",
            )
            total = merged[app]
            total.seconds += run.seconds
            total.turn_s += run.turn_s
            for kind, values in run.kinds.items():
                total.kinds[kind] += values
            total.errors += run.errors
            total.first_error = total.first_error or run.first_error
            log(
                f"  agent turn round {round_number + 1}/{options.rounds} {app}: {run.turns_per_second:7.1f} turns/s, "
                f"p99 {1000 * (figures.percentile(run.turn_s, 99) or 0):.0f} ms{f', {run.errors} errors' if run.errors else ''}"
            )
    d, r = merged["d"].summary(), merged["r"].summary()
    ratio = figures.ratio

    def kind_ratio(kind: str) -> float | None:
        # A closed loop at the same concurrency: the ratio of throughputs is the inverse ratio of mean latencies.
        return ratio(r[f"{kind}_mean_ms"], d[f"{kind}_mean_ms"])

    return {
        "agent_turn": {
            "d_over_rprime": ratio(d["turns_per_s"], r["turns_per_s"]),
            "p99_over_rprime": ratio(d["turn_p99_ms"], r["turn_p99_ms"]),
            "p50_over_rprime": ratio(d["turn_p50_ms"], r["turn_p50_ms"]),
            "d": d,
            "rprime": r,
        },
        "settle": {
            "d_over_rprime": kind_ratio("settle_patch"),
            "d_p50_ms": d["settle_patch_p50_ms"],
            "rprime_p50_ms": r["settle_patch_p50_ms"],
        },
        "intent_post": {
            "d_over_rprime": kind_ratio("intent_post"),
            "d_p50_ms": d["intent_post_p50_ms"],
            "rprime_p50_ms": r["intent_post_p50_ms"],
        },
    }


def _memory(fixtures: Fixtures, server: Any, options: Options) -> dict[str, Any]:
    """Worker RSS after one request of each kind, then after `mix_requests` mixed ones (16 at a time)."""
    auth = {"Authorization": f"Token {fixtures.token}"}
    page = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={fixtures.session}"}
    api = "/api/v1/tickets"
    turn = json.dumps({"role": "customer", "content": TURN_TEXT}).encode()
    action = b'{"tool": "issue_refund", "item": "item-{u}", "amount_cents": 100}'
    pool = fixtures.action_tickets["m"]
    # Light requests mostly (10,000 of them must fit the run), one large state in twenty. No intents: mixed with
    # succeeded actions on the same tickets they were answered 409 in a trial run; they are the agent turn's.
    mix: list[tuple[str, str, dict[str, str], bytes]] = [
        ("GET", f"{api}/{fixtures.read_20}/state/", auth, b""),
        ("GET", f"{api}/{fixtures.read_20}/context/", auth, b""),
        ("GET", f"{api}/{fixtures.state_big}/state/", auth, b""),
        ("GET", f"/tickets/{fixtures.read_20}/", page, b""),
    ]
    for ticket in pool[:8]:
        mix.append(("POST", f"{api}/{ticket}/turns/", auth, turn))
        mix.append(("POST", f"{api}/{ticket}/actions/", {**auth, "Idempotency-Key": "{u}"}, action))
    run_mixed(server.port, mix, len(mix) * 2, 2)  # each kind in each worker, as a start
    start = worker_rss_kb(server)
    good, bad = run_mixed(server.port, mix, options.mix_requests, 16)
    after = worker_rss_kb(server)
    return {
        "rss_10k_over_start": figures.ratio(sum(after), sum(start)),
        "start_kb": start,
        "after_kb": after,
        "requests": good + bad,
        "errors": bad,
    }


def _server_version() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        row = cursor.fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


def render(result: dict[str, Any]) -> str:
    """The tables `make bench` prints."""
    meta = result["meta"]
    load = "wrk" if meta["load"] == "wrk" else "a Python load generator (wrk not installed)"
    lines = [
        "",
        f"Throughput ({load}, {meta['connections']} connections, median of {meta['rounds']} rounds of "
        f"{meta['seconds_per_cell']:g}s): reads against PS, writes against R'; ratios of requests per second",
        "",
        figures.throughput_table(result, result["orm_queries"]),
    ]
    agent = result["agent_turn"]
    lines += [
        "",
        f"The whole agent turn, 16 agents (asyncio generator, {meta['agent_seconds']:g}s x {meta['rounds']} rounds):",
        "",
    ]
    rows = []
    for name, label in (("d", "D"), ("rprime", "R'")):
        row = agent.get(name) or {}
        rows.append(
            [
                label,
                row.get("turns_per_s"),
                row.get("turn_p50_ms"),
                row.get("turn_p99_ms"),
                row.get("context_get_p50_ms"),
                row.get("turn_post_p50_ms"),
                row.get("intent_post_p50_ms"),
                row.get("settle_patch_p50_ms"),
                row.get("errors"),
            ]
        )
    rows.append(
        ["D/R' (ratios)", agent["d_over_rprime"], agent.get("p50_over_rprime"), agent["p99_over_rprime"]]
    )
    lines.append(
        figures.markdown_table(
            [
                "",
                "turns/s",
                "p50 ms",
                "p99 ms",
                "context p50",
                "turn p50",
                "intent p50",
                "settle p50",
                "errors",
            ],
            rows,
        )
    )
    lines += [
        "",
        f"settle PATCH D/R' {figures.cell(result['settle']['d_over_rprime'])}, intent POST D/R' "
        f"{figures.cell(result['intent_post']['d_over_rprime'])} (inverse ratio of mean latencies in the turn's loop)",
    ]
    trips = result["round_trips"]
    lines += ["", "Round trips on the wire per request (health checks included; statements apart):", ""]
    names = ("state_get", "context_get", "turn_post", "action_post", "intent_post", "settle")
    lines.append(
        figures.markdown_table(
            ["", *names],
            [
                ["round trips", *(trips.get(n) for n in names)],
                ["statements", *((trips.get("statements") or {}).get(n) for n in names)],
            ],
        )
    )
    growth = result["growth"]
    detail = result["growth_detail"]
    long = f"{detail.get('long_turns', 50_000):,}"
    queue = f"{detail.get('queue_tickets', 1_000_000):,}"
    lines += ["", "Growth (one client, median ms; ratio = large / small):", ""]
    rows = [
        [
            "state GET, 1 -> 2,000 actions",
            detail.get("state_1_ms"),
            detail.get("state_2000_ms"),
            growth["state_2000_over_1"],
        ],
        [
            "context GET, 1 -> 2,000 actions",
            detail.get("context_1_action_ms"),
            detail.get("context_2000_actions_ms"),
            growth["context_2000_actions_over_1"],
        ],
        [
            f"context GET, 20 -> {long} turns (and 2,000 actions)",
            detail.get("context_20_ms"),
            detail.get("context_long_ms"),
            growth["context_50000_over_20"],
        ],
        [
            "action POST, 0 -> 2,000 actions",
            detail.get("action_0_ms"),
            detail.get("action_2000_ms"),
            growth["action_2000_over_0"],
        ],
        [
            f"ticket page, 20 -> {long} turns",
            detail.get("ticket_page_20_ms"),
            detail.get("ticket_page_long_ms"),
            growth["ticket_page_50000_over_20"],
        ],
    ]
    for name, r in detail.get("queue_ratios", {}).items():
        rows.append(
            [
                f"queue page ({name}), 1k -> {queue} tickets",
                detail.get(f"queue_small_{name}_ms"),
                detail.get(f"queue_large_{name}_ms"),
                r,
            ]
        )
    lines.append(figures.markdown_table(["case", "small ms", "large ms", "ratio"], rows))
    memory = result["memory"]
    lines += [
        "",
        f"memory: desk worker RSS {memory.get('start_kb')} kB after one request of each kind, {memory.get('after_kb')} kB "
        f"after {memory.get('requests')} mixed requests ({memory.get('errors')} not 2xx): {figures.cell(memory['rss_10k_over_start'])}x",
    ]
    due = result.get("compaction_due") or {}
    now, queued = due.get("immediate") or {}, due.get("worker") or {}
    lines += [
        "",
        f"compaction due, immediate backend: the due turn {figures.cell(now.get('due_turn_p50_ms'))} ms p50, "
        f"a turn not due {figures.cell(now.get('not_due_turn_p50_ms'))} ms ({now.get('statuses')})",
        f"compaction due, worker backend: the due turn {figures.cell(queued.get('due_turn_p50_ms'))} ms p50, "
        f"queued -> applied {figures.cell(queued.get('queued_to_applied_p50_ms'))} ms p50, "
        f"{figures.cell(queued.get('queued_to_applied_max_ms'))} ms max ({queued.get('statuses')})",
    ]
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
        f"{meta['date']}, {meta['machine']}, {meta['database']}, {meta['elapsed_seconds']}s"
        f"{' (--quick: not figures)' if meta.get('quick') else ''}",
    ]
    missing = figures.missing_keys(result) + figures.unmeasured(result)
    if missing:
        lines.append(f"not measured: {', '.join(missing)}")
    return "\n".join(lines)
