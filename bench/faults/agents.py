"""The load test's agents: the README's agent loop over HTTP, retrying like a real client.

Each agent owns one ticket and loops: a customer turn, on every third round a refund (the tool call turn, the
intent reserved with its Idempotency-Key, the settle, the tool result turn), on every other round a constraint
stated against the state's ETag, and an agent reply that is a boundary (where compaction may fire, with a
summarizer that hangs every other call). Every request is retried with the same key and body on a connection
error, a 5xx, a 429 or `idempotency_key_in_flight` until it has an answer; a state change answered 412 after a
retry is re-read: when its text is there, the earlier attempt landed. Each write the agent believes done is logged with
its marker (a unique text in the turn or the constraint, the action's key), which `counts` looks for in the
database.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

RETRY_FOR_SECONDS = 180.0  # a master restart takes a few seconds; a client gives up only after this
REQUEST_TIMEOUT = 20.0  # above the summarizer deadline the servers run with


class GaveUp(Exception):
    """No answer from the desk within RETRY_FOR_SECONDS."""


@dataclass
class Written:
    """One write as the agent saw it: `acked` when the desk answered it with a success."""

    kind: str  # turn, action, settle, constraint
    ticket: str
    marker: str
    acked: bool
    status: int | None
    attempts: int
    replayed: bool = False

    def as_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class Stats:
    requests: int = 0
    retries: int = 0
    answers: Counter[int] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, *, status: int | None = None, error: str | None = None, retry: bool) -> None:
        with self.lock:
            self.requests += 1
            self.retries += retry
            if status is not None:
                self.answers[status] += 1
            if error is not None:
                self.transport_errors[error] += 1


@dataclass
class Client:
    port: int
    token: str
    stats: Stats

    def send(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str], int]:
        """The desk's answer (status, body, headers, attempts), retried with the same request until it is one
        a client acts on (a 2xx, or a 4xx other than a key in flight or a 429)."""
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Authorization": f"Token {self.token}", **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        give_up = time.monotonic() + RETRY_FOR_SECONDS
        attempt = 0
        while True:
            attempt += 1
            retry = attempt > 1
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT)
                try:
                    conn.request(method, path, body=data, headers=all_headers)
                    response = conn.getresponse()
                    raw = response.read()
                    answer_headers = {k.lower(): v for k, v in response.getheaders()}
                finally:
                    conn.close()
            except (OSError, http.client.HTTPException) as exc:
                self.stats.record(error=type(exc).__name__, retry=retry)
            else:
                self.stats.record(status=response.status, retry=retry)
                try:
                    answer = json.loads(raw) if raw else {}
                except ValueError:
                    answer = {"error": "not_json", "raw": raw[:200].decode("latin-1")}
                in_flight = response.status == 409 and answer.get("error") == "idempotency_key_in_flight"
                if response.status < 500 and response.status != 429 and not in_flight:
                    return response.status, answer, answer_headers, attempt
            if time.monotonic() > give_up:
                raise GaveUp(f"{method} {path}: no answer after {attempt} attempts")
            time.sleep(min(0.1 * attempt, 2.0) * random.uniform(0.5, 1.5))


@dataclass
class Agent:
    index: int
    ticket: str
    client: Client
    stop: threading.Event
    log: list[Written] = field(default_factory=list)
    rounds: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"/api/v1/tickets/{self.ticket}"

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.round(self.rounds + 1)
                self.rounds += 1
        except GaveUp as exc:
            self.failures.append(str(exc))
        except Exception as exc:  # the report says what broke the agent; the run goes on
            self.failures.append(f"{type(exc).__name__}: {exc}")

    def round(self, k: int) -> None:
        self.turn(k, "c", {"role": "customer", "content": f"Message {k} from the customer of {self.ticket}."})
        if k % 3 == 0:
            self.refund(k)
        if k % 2 == 0:
            self.constraint(k)
        self.turn(
            k,
            "a",
            {
                "role": "agent",
                "content": f"Reply {k}: I am looking into it for you. " * 3,
                "boundary": "reply_sent",
            },
        )

    def marker(self, k: int, part: str) -> str:
        return f"[lf:{self.ticket}:{k}{part}]"

    def turn(self, k: int, part: str, body: dict[str, Any]) -> int | None:
        marker = self.marker(k, part)
        body = {**body, "content": f"{body.get('content', '')} {marker}".strip()}
        status, answer, headers, attempts = self.client.send(
            "POST", f"{self.base}/turns/", body, {"Idempotency-Key": f"{self.ticket}-{k}{part}"}
        )
        acked = status == 201
        self.log.append(
            Written("turn", self.ticket, marker, acked, status, attempts, "idempotent-replayed" in headers)
        )
        if not acked:
            self.failures.append(f"turn {marker}: {status} {answer}")
            return None
        return int(answer["turn"])

    def refund(self, k: int) -> None:
        item = f"item {k}"
        call_id = f"call-{k}"
        at_turn = self.turn(
            k,
            "t",
            {
                "role": "tool_call",
                "tool": "issue_refund",
                "tool_call_id": call_id,
                "args": {"item": item, "amount_cents": 100 + k},
            },
        )
        key = f"{self.ticket}-rf-{k}"
        body: dict[str, Any] = {
            "tool": "issue_refund",
            "item": item,
            "amount_cents": 100 + k,
            "status": "intended",
        }
        if at_turn is not None:
            body["at_turn"] = at_turn
        status, answer, headers, attempts = self.client.send(
            "POST", f"{self.base}/actions/", body, {"Idempotency-Key": key}
        )
        acked = status == 201
        self.log.append(
            Written("action", self.ticket, key, acked, status, attempts, "idempotent-replayed" in headers)
        )
        if not acked:
            self.failures.append(f"action {key}: {status} {answer}")
            return
        action_id = answer["action"]["id"]
        status, answer, _, attempts = self.client.send(
            "PATCH",
            f"{self.base}/actions/{action_id}/",
            {"status": "succeeded", "external_ref": f"pay-{key}"},
        )
        self.log.append(Written("settle", self.ticket, key, status == 200, status, attempts))
        if status != 200:
            self.failures.append(f"settle {key}: {status} {answer}")
        self.turn(
            k,
            "r",
            {"role": "tool_result", "tool": "issue_refund", "tool_call_id": call_id, "content": "refunded"},
        )

    def constraint(self, k: int) -> None:
        marker = self.marker(k, "s")
        text = f"constraint {k} of the customer {marker}"
        attempts = 0
        for _ in range(20):
            status, state, headers, tries = self.client.send("GET", f"{self.base}/state/")
            attempts += tries
            if status != 200:
                break
            if any(c["text"] == text for c in state.get("customer_constraints", [])):
                # An earlier attempt landed (its answer was lost with a killed worker): done, not again.
                self.log.append(
                    Written("constraint", self.ticket, marker, True, 200, attempts, replayed=True)
                )
                return
            status, _, _, tries = self.client.send(
                "POST",
                f"{self.base}/state/",
                {"op": "constraint_stated", "text": text},
                {"If-Match": headers["etag"]},
            )
            attempts += tries
            if status == 200:
                self.log.append(Written("constraint", self.ticket, marker, True, status, attempts))
                return
            if status != 412:
                break
        self.log.append(Written("constraint", self.ticket, marker, False, status, attempts))
        self.failures.append(f"constraint {marker}: {status}")
