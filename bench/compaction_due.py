"""A turn on which compaction is due, with the immediate backend (it runs inside the turn) and the worker
backend (the turn queues it; `manage.py db_worker` applies it): the due turn's latency beside a not-due one's,
and with the worker the time from the turn's "queued" answer to the event's "applied", polled every 20 ms.

The tickets are filled through the desk's own API in this process (the immediate backend, never crossing the
threshold) up to one agent reply short of it, so the measured turn is the one that crosses, at a boundary (a
reply completing a step; a customer turn is "due mid-decision" and deferred). The not-due turn it is compared
with is the same reply on a ticket of a class whose threshold is never reached.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.test import Client

from bench import figures
from bench.fixtures import TURN_TEXT, Fixtures, Log
from bench.load import Client as HTTPClient
from bench.servers import server_env, servers
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

WORKER_BACKEND = "django_tasks_db.DatabaseBackend"
SETTLED = ("applied", "forced", "failed", "over_budget", "superseded", "deferred")


# Longer than the customer's turn (bench.fixtures.TURN_TEXT): see due_tickets.
AGENT_REPLY = (
    "Thank you for your patience, and I am sorry about the trouble with this order. I have opened a claim with the "
    "carrier for the parasol that shows as delivered yesterday, and they will answer within two working days. For "
    "the table, could you send me a photo of the cracked corner? As soon as it arrives I will refund that item in "
    "full to your original payment method, and you will not need to send anything back."
)


def turn_body(n: int) -> bytes:
    """The n-th turn of a due ticket's thread: customer, then an agent reply that completes a step, in turn."""
    if n % 2 == 0:
        return json.dumps({"role": "customer", "content": TURN_TEXT}).encode()
    return json.dumps({"role": "agent", "content": AGENT_REPLY, "boundary": "replied"}).encode()


def due_tickets(token: str, prefix: str, count: int) -> list[str]:
    """`count` tickets whose next agent reply (completing a step, so at a boundary) crosses the class's
    compaction threshold and whose turns before it never did (customer and agent in turn).

    Pairs are posted while a whole pair still fits; then a customer turn if it fits. The reply crosses either
    way: after that customer turn because the pair did not fit, without it because the reply is the longer."""
    klass, _ = TicketClass.objects.get_or_create(
        slug="bench-due",
        defaults={"token_budget": 4000, "compaction_threshold": 0.5, "keep_recent_tokens": 0},
    )
    threshold = klass.threshold_tokens
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")

    def post(ticket_id: str, n: int) -> int:
        answer = client.post(
            f"/api/v1/tickets/{ticket_id}/turns/", turn_body(n), content_type="application/json"
        )
        if answer.status_code != 201 or answer.json()["compaction"]["status"] != "not_due":
            raise RuntimeError(f"filling {ticket_id}: {answer.status_code} {answer.content[:200]!r}")
        return int(answer.json()["tokens"])

    made = []
    for i in range(count):
        ticket_id = f"B-DUE-{prefix}-{i}"
        open_ticket(ticket_id=ticket_id, order_id="SU-B", seller_type="marketplace", ticket_class=klass)
        customer = reply = 0
        while not (
            customer and Ticket.objects.get(ticket_id=ticket_id).context_tokens + customer + reply > threshold
        ):
            customer, reply = post(ticket_id, 0), post(ticket_id, 1)
        if reply <= customer:
            raise RuntimeError("the due tickets' agent reply must be longer than the customer's turn")
        if Ticket.objects.get(ticket_id=ticket_id).context_tokens + customer <= threshold:
            post(ticket_id, 0)
        made.append(ticket_id)
    return made


def measure(fixtures: Fixtures, log: Log, count: int = 6) -> dict[str, Any]:
    log(f"compaction due: {count} tickets per backend, one agent reply short of the threshold")
    tickets = {backend: due_tickets(fixtures.token, backend, count) for backend in ("immediate", "worker")}
    auth = {"Authorization": f"Token {fixtures.token}", "Content-Type": "application/json"}
    body = turn_body(1)  # the agent reply that crosses
    out: dict[str, Any] = {}

    immediate_env = server_env({"TASKS_BACKEND": "django.tasks.backends.immediate.ImmediateBackend"})
    with servers({"d": ("bench.wsgi", immediate_env)}) as started:
        client = HTTPClient(started["d"].port)
        not_due, due, statuses = [], [], []
        for n, ticket_id in enumerate(tickets["immediate"]):
            roomy = fixtures.turn_tickets["m"][n % len(fixtures.turn_tickets["m"])]
            not_due.append(client.timed("POST", f"/api/v1/tickets/{roomy}/turns/", auth, body)[0])
            elapsed, status, answer = _post(client, f"/api/v1/tickets/{ticket_id}/turns/", auth, body)
            due.append(elapsed)
            statuses.append(answer.get("compaction", {}).get("status") if status == 201 else f"http {status}")
        client.close()
    out["immediate"] = {
        "due_turn_p50_ms": _ms(figures.median(due)),
        "not_due_turn_p50_ms": _ms(figures.median(not_due)),
        "due_over_not_due": figures.ratio(figures.median(due), figures.median(not_due)),
        "statuses": statuses,
    }

    worker_env = server_env({"TASKS_BACKEND": WORKER_BACKEND})
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "db_worker", "--interval", "0.05", "--no-startup-delay", "--no-reload"],
        cwd=settings.BASE_DIR,
        env=worker_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with servers({"d": ("bench.wsgi", worker_env)}) as started:
            client = HTTPClient(started["d"].port)
            due, applied_s, statuses = [], [], []
            for ticket_id in tickets["worker"]:
                elapsed, status, answer = _post(client, f"/api/v1/tickets/{ticket_id}/turns/", auth, body)
                queued_at = time.perf_counter()
                due.append(elapsed)
                statuses.append(
                    answer.get("compaction", {}).get("status") if status == 201 else f"http {status}"
                )
                final = _wait_applied(client, ticket_id, auth, deadline=time.perf_counter() + 60)
                if final == "applied":
                    applied_s.append(time.perf_counter() - queued_at)
                statuses.append(final)
            client.close()
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
    out["worker"] = {
        "due_turn_p50_ms": _ms(figures.median(due)),
        "queued_to_applied_p50_ms": _ms(figures.median(applied_s)),
        "queued_to_applied_max_ms": _ms(max(applied_s) if applied_s else None),
        "statuses": statuses,
    }
    return out


def _post(
    client: HTTPClient, path: str, headers: dict[str, str], body: bytes
) -> tuple[float, int, dict[str, Any]]:
    started = time.perf_counter()
    client.conn.request("POST", path, body=body, headers=headers)
    response = client.conn.getresponse()
    raw = response.read()
    elapsed = time.perf_counter() - started
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = {}
    return elapsed, response.status, answer if isinstance(answer, dict) else {}


def _wait_applied(client: HTTPClient, ticket_id: str, headers: dict[str, str], deadline: float) -> str:
    """The ticket's newest compaction event's status once it is settled (or what it was at the deadline)."""
    status = "none"
    while time.perf_counter() < deadline:
        client.conn.request("GET", f"/api/v1/tickets/{ticket_id}/compactions/", headers=headers)
        response = client.conn.getresponse()
        events = json.loads(response.read()) if response.status == 200 else []
        if isinstance(events, dict):  # a paginated answer
            events = events.get("results", [])
        if events:
            newest = max(events, key=lambda e: e.get("number", 0))
            status = str(newest.get("status"))
            if status in SETTLED:
                return status
        time.sleep(0.02)
    return f"{status} after the deadline"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)
