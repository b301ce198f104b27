"""What each API call does, written once for both clients.

A flow is a generator: it yields `Request`s and is sent back a `Reply` (or has the desk's error thrown
into it). `DeskClient` drives flows with blocking I/O, `AsyncDeskClient` with `await`; retries of one
request (connection errors, 5xx, 429, a key still in flight) happen in the drivers, the loops that span
several requests (If-Match: re-read and re-apply) happen here.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sundry_desk_client.errors import DeskError, StaleVersion, TicketExists
from sundry_desk_client.models import (
    ActionRecorded,
    Compaction,
    Context,
    HistoryEntry,
    HistoryPage,
    PinnedState,
    Ticket,
    TurnAnswer,
)

T = TypeVar("T")

# Statuses worth sending again: the desk rolled the request back or never saw it.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_CODES = frozenset({"idempotency_key_in_flight"})


@dataclass
class Request:
    method: str
    path: str
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] | None = None


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: Any
    attempts: int = 1

    @property
    def replayed(self) -> bool:
        return str(self.headers.get("Idempotent-Replayed", "")).lower() == "true"


Flow = Generator[Request, Reply, T]


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` more attempts after the first, waiting `backoff * 2**n` (with jitter, at most `max_backoff`),
    or what a 429/503's `Retry-After` asks for (capped the same way)."""

    retries: int = 3
    backoff: float = 0.25
    max_backoff: float = 5.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), self.max_backoff)
            except ValueError:
                pass
        base = min(self.backoff * (2 ** (attempt - 1)), self.max_backoff)
        return base * (0.5 + random.random() / 2)

    def should_retry_status(self, status: int, body: Any) -> bool:
        if status in RETRY_STATUSES:
            return True
        code = body.get("error") if isinstance(body, dict) else None
        return status == 409 and code in RETRY_CODES


def new_key(prefix: str = "sdc") -> str:
    """A fresh Idempotency-Key: unique per logical request, reused by every retry of it."""
    return f"{prefix}-{uuid.uuid4().hex}"


def etag(version: int) -> str:
    return f'"{version}"'


def tickets(ticket_id: str, what: str = "") -> str:
    return f"tickets/{ticket_id}/" + (f"{what}/" if what else "")


# ---------------------------------------------------------------- tickets


def open_ticket(
    ticket_id: str, *, order_id: str, seller_type: str, ticket_class: str, system_prompt: str | None
) -> Flow[Ticket]:
    """Open a ticket. If the create was retried (its first answer was lost) and the desk now says the
    ticket exists, the ticket is ours when it matches what we asked for: return it."""
    body: dict[str, Any] = {
        "ticket_id": ticket_id,
        "order_id": order_id,
        "seller_type": seller_type,
        "ticket_class": ticket_class,
    }
    if system_prompt is not None:
        body["system_prompt"] = system_prompt
    try:
        reply = yield Request("POST", "tickets/", json=body)
    except TicketExists as exc:
        if exc.attempts <= 1:
            raise
        existing = Ticket.model_validate((yield Request("GET", tickets(ticket_id))).body)
        if (existing.order_id, existing.seller_type, existing.ticket_class) != (
            order_id,
            seller_type,
            ticket_class,
        ):
            raise
        return existing
    return Ticket.model_validate(reply.body)


def get_ticket(ticket_id: str) -> Flow[Ticket]:
    return Ticket.model_validate((yield Request("GET", tickets(ticket_id))).body)


def set_status(ticket_id: str, status: str) -> Flow[Ticket]:
    reply = yield Request("PATCH", tickets(ticket_id), json={"status": status})
    return Ticket.model_validate(reply.body)


# ---------------------------------------------------------------- turns and context


def append_turn(
    ticket_id: str,
    *,
    role: str,
    content: str,
    tool: str,
    args: dict[str, Any] | None,
    tool_call_id: str,
    boundary: str,
    idempotency_key: str | None,
) -> Flow[TurnAnswer]:
    body: dict[str, Any] = {"role": role, "content": content}
    if tool:
        body["tool"] = tool
    if args is not None:
        body["args"] = args
    if tool_call_id:
        body["tool_call_id"] = tool_call_id
    if boundary:
        body["boundary"] = boundary
    key = idempotency_key or new_key("turn")
    reply = yield Request("POST", tickets(ticket_id, "turns"), json=body, headers={"Idempotency-Key": key})
    return TurnAnswer.model_validate({**reply.body, "replayed": reply.replayed})


def context(ticket_id: str) -> Flow[Context]:
    return Context.model_validate((yield Request("GET", tickets(ticket_id, "context"))).body)


def compactions(ticket_id: str) -> Flow[list[Compaction]]:
    reply = yield Request("GET", tickets(ticket_id, "compactions"))
    return [Compaction.model_validate(event) for event in reply.body]


# ---------------------------------------------------------------- state


def get_state(ticket_id: str) -> Flow[PinnedState]:
    return PinnedState.model_validate((yield Request("GET", tickets(ticket_id, "state"))).body)


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def already_applied(state: PinnedState, op: str, text: str) -> bool:
    """Whether the state already shows this change: asked only after an attempt whose answer was lost."""
    wanted = _norm(text)
    if op == "constraint_stated":
        return any(_norm(c.text) == wanted for c in state.customer_constraints)
    if op == "question_opened":
        return any(_norm(q.text) == wanted for q in state.open_questions)
    if op == "decision_made":
        return any(_norm(d.text) == wanted for d in state.decisions)
    if op == "question_resolved":
        return not any(_norm(q.id) == wanted or _norm(q.text) == wanted for q in state.open_questions)
    return False


def change_state(
    ticket_id: str, *, op: str, text: str, at_turn: int | None, version: int | None, max_attempts: int
) -> Flow[PinnedState]:
    """POST a state change with If-Match; on 412 re-read the state and apply the change again.

    With `version` given, the first attempt uses it; otherwise the state is read first. When an attempt's
    answer was lost (the client retried it) and the next answer is 412, the change may have landed: the
    re-read state is checked and, if it already shows the change, returned instead of applying it twice.
    """
    body: dict[str, Any] = {"op": op, "text": text}
    if at_turn is not None:
        body["at_turn"] = at_turn
    uncertain = False
    last: StaleVersion | None = None
    for _ in range(max(1, max_attempts)):
        if version is None:
            state = PinnedState.model_validate((yield Request("GET", tickets(ticket_id, "state"))).body)
            if uncertain and already_applied(state, op, text):
                return state
            version = state.version
        try:
            reply = yield Request(
                "POST", tickets(ticket_id, "state"), json=body, headers={"If-Match": etag(version)}
            )
        except StaleVersion as exc:
            last = exc
            uncertain = uncertain or exc.attempts > 1
            version = None
            continue
        return PinnedState.model_validate(reply.body)
    assert last is not None
    raise last


# ---------------------------------------------------------------- actions and intents


def record_action(
    ticket_id: str,
    *,
    tool: str,
    item: str,
    amount_cents: int,
    at_turn: int | None,
    reversible: bool,
    args: dict[str, Any] | None,
    repeat_of_earlier: bool,
    reason: str,
    status: str | None,
    idempotency_key: str | None,
    expects: dict[str, int] | None = None,
) -> Flow[ActionRecorded]:
    body: dict[str, Any] = {
        "tool": tool,
        "item": item,
        "amount_cents": amount_cents,
        "reversible": reversible,
    }
    if at_turn is not None:
        body["at_turn"] = at_turn
    if args is not None:
        body["args"] = args
    if repeat_of_earlier:
        body["repeat_of_earlier"] = True
        body["reason"] = reason
    elif reason:
        body["reason"] = reason
    if status is not None:
        body["status"] = status
    if expects is not None:
        body["expects"] = expects
    key = idempotency_key or new_key("intent" if status == "intended" else "action")
    reply = yield Request("POST", tickets(ticket_id, "actions"), json=body, headers={"Idempotency-Key": key})
    return ActionRecorded.model_validate({**reply.body, "replayed": reply.replayed})


def settle_intent(ticket_id: str, action_id: str, *, status: str, reason: str) -> Flow[ActionRecorded]:
    """PATCH an intent to succeeded or failed. Settling it the same way again answers the same, so a retry
    whose first answer was lost is safe."""
    body: dict[str, Any] = {"status": status}
    if reason:
        body["reason"] = reason
    reply = yield Request("PATCH", f"tickets/{ticket_id}/actions/{action_id}/", json=body)
    data = reply.body
    if isinstance(data, dict) and "action" not in data and "id" in data:
        data = {"action": data}  # a desk that answers the action itself
    return ActionRecorded.model_validate({**data, "replayed": reply.replayed})


# ---------------------------------------------------------------- handoffs and history


def record_handoff(
    ticket_id: str, *, from_agent: str, to_agent: str, given: dict[str, Any] | None
) -> Flow[HistoryEntry]:
    body: dict[str, Any] = {"from_agent": from_agent, "to_agent": to_agent}
    if given is not None:
        body["given"] = given
    reply = yield Request("POST", tickets(ticket_id, "handoffs"), json=body)
    return HistoryEntry.model_validate(reply.body)


def history(ticket_id: str, *, page_url: str | None, params: dict[str, Any] | None) -> Flow[HistoryPage]:
    """One page of the ticket's history, newest first; `page_url` is a page's `next` or `previous`."""
    if page_url:
        reply = yield Request("GET", page_url)
    else:
        reply = yield Request("GET", tickets(ticket_id, "history"), params=params)
    body = reply.body
    if isinstance(body, list):  # an unpaginated answer
        body = {"results": body}
    return HistoryPage.model_validate(body)


def run_to_end(flow: Flow[T], send: Any) -> T:  # noqa: UP047 (the client supports Python 3.10)
    """Drive a flow with a blocking `send(Request) -> Reply` that raises DeskError."""
    try:
        request = next(flow)
        while True:
            try:
                reply = send(request)
            except DeskError as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun_to_end(flow: Flow[T], send: Any) -> T:  # noqa: UP047 (Python 3.10)
    """Drive a flow with an async `send(Request) -> Reply` that raises DeskError."""
    try:
        request = next(flow)
        while True:
            try:
                reply = await send(request)
            except DeskError as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
