"""The whole agent turn under load: 16 agents at once, each doing what an agent does per turn, one after another
(context GET, turn POST, intent POST, settle PATCH of that intent), on its own tickets, for a fixed time.

A sequence whose fourth request depends on the third's answer cannot be a wrk script, so this is an asyncio
generator in the bench's process (one connection per request, `Connection: close`, as gunicorn's sync workers
close after each answer anyway); the same generator drives the desk and R', so their ratio is fair, and it is
named in the report. The same client sends the memory case's mixed requests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import figures
from bench.figures import letters
from bench.fixtures import TURN_TEXT

KINDS = ("context_get", "turn_post", "intent_post", "settle_patch")


@dataclass
class AgentRun:
    """One fixed-duration run: whole turns completed, their latencies, each kind's, the failures."""

    seconds: float
    turn_s: list[float] = field(default_factory=list)
    kinds: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    errors: int = 0
    first_error: str = ""

    @property
    def turns_per_second(self) -> float:
        return len(self.turn_s) / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "turns": len(self.turn_s),
            "turns_per_s": round(self.turns_per_second, 2),
            "turn_p50_ms": _ms(figures.percentile(self.turn_s, 50)),
            "turn_p99_ms": _ms(figures.percentile(self.turn_s, 99)),
            "errors": self.errors,
        }
        for kind, values in self.kinds.items():
            out[f"{kind}_p50_ms"] = _ms(figures.percentile(values, 50))
            out[f"{kind}_mean_ms"] = _ms(figures.mean(values))
        if self.first_error:
            out["first_error"] = self.first_error[:300]
        return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


async def request(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a fresh loopback connection: (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body or method in ("POST", "PATCH", "PUT"):
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        raw = await reader.read(-1)
    finally:
        writer.close()
    return parse_response(raw)


def parse_response(raw: bytes) -> tuple[int, bytes]:
    """Status and body of a whole HTTP/1.1 answer read to its end (Content-Length or chunked)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {status_line!r}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            body += rest[:size]
            rest = rest[size + 2 :]
        return int(parts[1]), bytes(body)
    if "content-length" in headers:
        rest = rest[: int(headers["content-length"])]
    return int(parts[1]), rest


async def _agent(
    port: int, token: str, tickets: Sequence[str], deadline: float, name: str, run: AgentRun
) -> None:
    auth = {"Authorization": f"Token {token}"}
    n = 0
    while time.perf_counter() < deadline:
        ticket = tickets[n % len(tickets)]
        n += 1
        base = f"/api/v1/tickets/{ticket}"
        key = f"{name}-{letters(n)}"
        steps: list[tuple[str, str, str, dict[str, str], bytes]] = [
            ("context_get", "GET", f"{base}/context/", auth, b""),
            (
                "turn_post",
                "POST",
                f"{base}/turns/",
                auth,
                json.dumps({"role": "customer", "content": TURN_TEXT}).encode(),
            ),
            (
                "intent_post",
                "POST",
                f"{base}/actions/",
                {**auth, "Idempotency-Key": key},
                json.dumps(
                    {"tool": "issue_refund", "item": f"item-{key}", "amount_cents": 100, "status": "intended"}
                ).encode(),
            ),
        ]
        began = time.perf_counter()
        timings: dict[str, float] = {}
        answer = b""
        failed = False
        for kind, method, path, headers, body in steps:
            started = time.perf_counter()
            status, answer = await request(port, method, path, headers, body)
            timings[kind] = time.perf_counter() - started
            if not 200 <= status < 300:
                failed = True
                run.first_error = run.first_error or f"{kind} {status} {answer[:200]!r}"
                break
        if not failed:
            action_id = json.loads(answer)["action"]["id"]
            started = time.perf_counter()
            status, answer = await request(
                port,
                "PATCH",
                f"{base}/actions/{action_id}/",
                auth,
                json.dumps({"status": "succeeded"}).encode(),
            )
            timings["settle_patch"] = time.perf_counter() - started
            if not 200 <= status < 300:
                failed = True
                run.first_error = run.first_error or f"settle_patch {status} {answer[:200]!r}"
        if failed:
            run.errors += 1
            continue
        run.turn_s.append(time.perf_counter() - began)
        for kind, value in timings.items():
            run.kinds[kind].append(value)


def run_agents(
    port: int, token: str, agent_tickets: Sequence[Sequence[str]], seconds: float, name: str
) -> AgentRun:
    """Every agent in `agent_tickets` (one list of tickets each) at once for `seconds`."""

    async def main() -> AgentRun:
        started = time.perf_counter()
        deadline = started + seconds
        run = AgentRun(seconds=seconds)
        await asyncio.gather(
            *(_agent(port, token, mine, deadline, f"{name}-{i}", run) for i, mine in enumerate(agent_tickets))
        )
        run.seconds = time.perf_counter() - started  # the last turns finish after the deadline
        return run

    return asyncio.run(main())


def run_mixed(
    port: int, requests: Sequence[tuple[str, str, dict[str, str], bytes]], total: int, concurrency: int
) -> tuple[int, int]:
    """`total` requests cycling through `requests` (`{u}` in a header or the body made unique), `concurrency`
    at a time: (answered 2xx, not)."""

    async def main() -> tuple[int, int]:
        counter = iter(range(total))
        good = [0, 0]

        async def worker() -> None:
            for n in counter:
                method, path, headers, body = requests[n % len(requests)]
                unique = f"mix-{letters(n)}"
                status, _ = await request(
                    port,
                    method,
                    path,
                    {k: v.replace("{u}", unique) for k, v in headers.items()},
                    body.replace(b"{u}", unique.encode()),
                )
                good[0 if 200 <= status < 300 else 1] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return good[0], good[1]

    return asyncio.run(main())
