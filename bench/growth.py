"""Growth: how much slower a request gets as its ticket, its state or the queue grows (one client, median ms).

state GET at 2,000 actions vs 1; context GET at 2,000 actions vs 1, and for a ticket of 50,000 turns with 2,000
actions vs 20 turns; action POST at 2,000 actions vs 0; the ticket page at 50,000 turns vs 20; the queue's first
page, its 20th (the "Older" link followed 19 times) and its last at 1,000,000 tickets vs 1,000 (the worst of the
three is the figure; two filtered first pages are reported beside it).
"""

from __future__ import annotations

import html
import http.client
import json
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings

from bench import figures
from bench.fixtures import Fixtures, Log
from bench.load import Client as HTTPClient
from bench.measure import Options
from bench.queue_fill import fill_queue

Make = Callable[[int], tuple[str, str, dict[str, str], bytes]]


def sequential(client: HTTPClient, cases: dict[str, Make], samples: int) -> dict[str, list[float]]:
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


def ms(values: list[float]) -> float | None:
    found = figures.median(values)
    return None if found is None else round(found * 1000, 2)


def growth(
    fixtures: Fixtures, port: int, options: Options, log: Log
) -> tuple[dict[str, float | None], dict[str, Any]]:
    client = HTTPClient(port)
    auth = {"Authorization": f"Token {fixtures.token}"}
    page = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={fixtures.session}"}
    samples = options.growth_samples
    api = "/api/v1/tickets"

    def get(path: str, headers: dict[str, str]) -> Make:
        return lambda n: ("GET", path, headers, b"")

    def action(tickets: list[str]) -> Make:
        def make(n: int) -> tuple[str, str, dict[str, str], bytes]:
            body = json.dumps({"tool": "issue_refund", "item": f"grow-x-{n}", "amount_cents": 100}).encode()
            headers = {**auth, "Idempotency-Key": f"grow-x-{n}", "Content-Type": "application/json"}
            return "POST", f"{api}/{tickets[n % len(tickets)]}/actions/", headers, body

        return make

    long = f"{fixtures.long_turns:,}"
    log(
        f"growth: state and context at 1 and 2,000 actions, context at 20 and {long} turns, action POST at 0 and 2,000"
    )
    timings = sequential(
        client,
        {
            "state_1": get(f"{api}/{fixtures.state_1}/state/", auth),
            "state_2000": get(f"{api}/{fixtures.state_big}/state/", auth),
            "context_1_action": get(f"{api}/{fixtures.state_1}/context/", auth),
            "context_2000_actions": get(f"{api}/{fixtures.state_big}/context/", auth),
            "context_20": get(f"{api}/{fixtures.read_20}/context/", auth),
            "context_long": get(f"{api}/{fixtures.read_long}/context/", auth),
            "action_0": action(fixtures.actions_0),
            "action_2000": action(fixtures.actions_big),
        },
        samples * 2,
    )
    log(f"growth: the ticket page at 20 and {long} turns")
    timings.update(
        sequential(
            client,
            {
                "ticket_page_20": get(f"/tickets/{fixtures.read_20}/", page),
                "ticket_page_long": get(f"/tickets/{fixtures.read_long}/", page),
            },
            max(3, samples // 3),
        )
    )
    g = figures.growth_ratio
    out: dict[str, float | None] = {
        "state_2000_over_1": g(timings["state_1"], timings["state_2000"]),
        "context_2000_actions_over_1": g(timings["context_1_action"], timings["context_2000_actions"]),
        "context_50000_over_20": g(timings["context_20"], timings["context_long"]),
        "action_2000_over_0": g(timings["action_0"], timings["action_2000"]),
        "ticket_page_50000_over_20": g(timings["ticket_page_20"], timings["ticket_page_long"]),
    }
    detail: dict[str, Any] = {f"{name}_ms": ms(values) for name, values in timings.items()}
    detail["long_turns"] = fixtures.long_turns
    queue_out, queue_detail = _queue_growth(client, page, options, log)
    out.update(queue_out)
    detail.update(queue_detail)
    client.close()
    return out, detail


def _older_link(port: int, path: str, page: dict[str, str]) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
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


def _queue_growth(
    client: HTTPClient, page: dict[str, str], options: Options, log: Log
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """The queue's pages at 1,000 queue tickets, then again at `queue_tickets` (keyset pages: page 20 is reached
    by following "Older" 19 times from the first, the last by the "Last" link, as a supervisor would). The
    queue is newest first; the bench's own tickets are the oldest, so the last page is theirs at both sizes
    and the first 20 pages are the fill's rows at both."""
    timings: dict[str, list[float]] = {}
    sizes = ("small", 1000), ("large", options.queue_tickets)
    for label, total in sizes:
        log(f"queue: filling to {total:,} tickets (SQL, generate_series)")
        fill_queue(total, log)
        page_20 = "/"
        for _ in range(19):
            page_20 = _older_link(client.port, page_20, page)
        timings.update(
            sequential(
                client,
                {
                    f"queue_{label}_first": lambda n: ("GET", "/", page, b""),
                    f"queue_{label}_page_20": lambda n, path=page_20: ("GET", path, page, b""),  # type: ignore[misc]
                    f"queue_{label}_last": lambda n: ("GET", "/?last=1", page, b""),
                    f"queue_{label}_unreviewed": lambda n: ("GET", "/?flags=needs_review", page, b""),
                    f"queue_{label}_state_full": lambda n: ("GET", "/?flags=state_over_threshold", page, b""),
                },
                options.growth_samples,
            )
        )
    ratios = {
        name: figures.growth_ratio(timings[f"queue_small_{name}"], timings[f"queue_large_{name}"])
        for name in ("first", "page_20", "last", "unreviewed", "state_full")
    }
    pages = [r for r in (ratios["first"], ratios["page_20"], ratios["last"]) if r is not None]
    worst = max(pages) if pages else None
    detail: dict[str, Any] = {f"{name}_ms": ms(values) for name, values in timings.items()}
    detail["queue_ratios"] = ratios
    detail["queue_tickets"] = options.queue_tickets
    return {"queue_1m_over_1k": worst}, detail
