"""`DeskClient` (blocking) and `AsyncDeskClient` (asyncio): the whole agent API of Sundry Desk.

    client = DeskClient("http://127.0.0.1:8000", token)
    client.append_turn("T-40118", role="customer", content="The table arrived scratched.")

Every request is retried on connection errors, 5xx, 429 and "same key still in flight", with backoff.
Turns and actions always carry an Idempotency-Key (yours, or a fresh one per call) that every retry
reuses, so a turn or an action whose answer was lost is stored once. State changes carry If-Match and
re-read and re-apply on 412.

One module although over 400 lines: the blocking and the asyncio client mirror each other method by
method (the request flows they share are in `_flows.py`), so a change is made to both in one place.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2 as httpx

from sundry_desk_client import _flows as flows
from sundry_desk_client.errors import DeskUnavailable, error_for
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

USER_AGENT = "sundry-desk-client/0.1"


def _api_base(base_url: str) -> str:
    """`http://host:8000` or `http://host:8000/api/v1/`: both mean the desk's API root."""
    root = base_url.rstrip("/")
    if not root.endswith("/api/v1"):
        root += "/api/v1"
    return root + "/"


def _headers(token: str, extra: dict[str, str] | None) -> dict[str, str]:
    return {
        "Authorization": f"Token {token}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
        **(extra or {}),
    }


def _body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


class _Base:
    def __init__(
        self, base_url: str, token: str, *, retries: int, backoff: float, max_backoff: float
    ) -> None:
        if not token:
            raise ValueError(
                "DeskClient needs an agent token (python manage.py create_agent NAME prints one)"
            )
        self.base_url = _api_base(base_url)
        self.policy = flows.RetryPolicy(retries=retries, backoff=backoff, max_backoff=max_backoff)


class DeskClient(_Base):
    """The desk's API with blocking I/O. Use as a context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.25,
        max_backoff: float = 5.0,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, retries=retries, backoff=backoff, max_backoff=max_backoff)
        self._http = httpx.Client(
            base_url=self.base_url, headers=_headers(token, headers), timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DeskClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, request: flows.Request) -> flows.Reply:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    request.method,
                    request.path,
                    json=request.json,
                    headers=request.headers,
                    params=request.params,
                )
            except httpx.TransportError as exc:
                if attempt > self.policy.retries:
                    raise DeskUnavailable(
                        f"the desk at {self.base_url} could not be reached: {exc!r}", attempts=attempt
                    ) from exc
                time.sleep(self.policy.delay(attempt))
                continue
            body = _body(response)
            if response.status_code < 400:
                return flows.Reply(response.status_code, response.headers, body, attempt)
            if attempt <= self.policy.retries and self.policy.should_retry_status(response.status_code, body):
                time.sleep(self.policy.delay(attempt, response.headers.get("Retry-After")))
                continue
            raise error_for(response.status_code, body, text=response.text, attempts=attempt)

    def _run(self, flow: flows.Flow[flows.T]) -> flows.T:
        return flows.run_to_end(flow, self._send)

    # ------------------------------------------------------------ tickets

    def open_ticket(
        self,
        ticket_id: str,
        *,
        order_id: str,
        seller_type: str,
        ticket_class: str,
        system_prompt: str | None = None,
    ) -> Ticket:
        """Open a ticket of a class (its slug); the pinned state starts empty at version 1."""
        return self._run(
            flows.open_ticket(
                ticket_id,
                order_id=order_id,
                seller_type=seller_type,
                ticket_class=ticket_class,
                system_prompt=system_prompt,
            )
        )

    def get_ticket(self, ticket_id: str) -> Ticket:
        """The ticket with its token figures."""
        return self._run(flows.get_ticket(ticket_id))

    def set_status(self, ticket_id: str, status: str) -> Ticket:
        """Move the ticket to open, waiting, resolved or escalated."""
        return self._run(flows.set_status(ticket_id, status))

    # ------------------------------------------------------------ turns and context

    def append_turn(
        self,
        ticket_id: str,
        *,
        role: str,
        content: str = "",
        tool: str = "",
        args: dict[str, Any] | None = None,
        tool_call_id: str = "",
        boundary: str = "",
        idempotency_key: str | None = None,
    ) -> TurnAnswer:
        """Append one turn (customer, agent, tool_call, tool_result). Without `idempotency_key` a fresh key
        is made for this call; retries reuse it, so the turn is stored once. `answer.replayed` says the desk
        answered from its record; `answer.compaction.status` says what compaction did."""
        return self._run(
            flows.append_turn(
                ticket_id,
                role=role,
                content=content,
                tool=tool,
                args=args,
                tool_call_id=tool_call_id,
                boundary=boundary,
                idempotency_key=idempotency_key,
            )
        )

    def context(self, ticket_id: str) -> Context:
        """The assembled request to send the model: pinned state, active summary, the turns since."""
        return self._run(flows.context(ticket_id))

    def compactions(self, ticket_id: str) -> list[Compaction]:
        return self._run(flows.compactions(ticket_id))

    # ------------------------------------------------------------ state

    def state(self, ticket_id: str) -> PinnedState:
        """The pinned state; `.version` is its ETag."""
        return self._run(flows.get_state(ticket_id))

    def change_state(
        self,
        ticket_id: str,
        *,
        op: str,
        text: str,
        at_turn: int | None = None,
        version: int | None = None,
        max_attempts: int = 5,
    ) -> PinnedState:
        """Record a constraint, a question opened or resolved, or a decision, with If-Match: on 412 the
        state is read again and the change re-applied (up to `max_attempts`), then StaleVersion."""
        return self._run(
            flows.change_state(
                ticket_id, op=op, text=text, at_turn=at_turn, version=version, max_attempts=max_attempts
            )
        )

    # ------------------------------------------------------------ actions and intents

    def record_action(
        self,
        ticket_id: str,
        *,
        tool: str,
        item: str = "",
        amount_cents: int = 0,
        at_turn: int | None = None,
        reversible: bool = False,
        args: dict[str, Any] | None = None,
        repeat_of_earlier: bool = False,
        reason: str = "",
        idempotency_key: str | None = None,
    ) -> ActionRecorded:
        """Record an action that has succeeded. A second irreversible one on the same item raises
        RepeatRefused (`.earlier_action`) unless `repeat_of_earlier=True` with a `reason`."""
        return self._run(
            flows.record_action(
                ticket_id,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                at_turn=at_turn,
                reversible=reversible,
                args=args,
                repeat_of_earlier=repeat_of_earlier,
                reason=reason,
                status=None,
                idempotency_key=idempotency_key,
            )
        )

    def reserve_intent(
        self,
        ticket_id: str,
        *,
        tool: str,
        item: str = "",
        amount_cents: int = 0,
        at_turn: int | None = None,
        reversible: bool = False,
        args: dict[str, Any] | None = None,
        repeat_of_earlier: bool = False,
        reason: str = "",
        idempotency_key: str | None = None,
        expects: dict[str, int] | None = None,
    ) -> ActionRecorded:
        """Reserve an action before its tool runs (`"status": "intended"`). RepeatRefused means: do not run
        the tool; so do BeliefStale (`expects`, what the agent believes of the ticket's money, e.g.
        `{"refunded_cents_total": 0}` from the state it was given, is not the desk's) and CapExceeded.
        Settle it afterwards with `settle_intent`."""
        return self._run(
            flows.record_action(
                ticket_id,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                at_turn=at_turn,
                reversible=reversible,
                args=args,
                repeat_of_earlier=repeat_of_earlier,
                reason=reason,
                status="intended",
                idempotency_key=idempotency_key,
                expects=expects,
            )
        )

    def settle_intent(
        self, ticket_id: str, action_id: str, *, succeeded: bool, reason: str = ""
    ) -> ActionRecorded:
        """Settle an intent: succeeded, or failed with a reason (a failed intent releases the item)."""
        status = "succeeded" if succeeded else "failed"
        if not succeeded and not reason:
            reason = "the tool failed"
        return self._run(flows.settle_intent(ticket_id, action_id, status=status, reason=reason))

    # ------------------------------------------------------------ handoffs and history

    def record_handoff(
        self, ticket_id: str, *, from_agent: str, to_agent: str, given: dict[str, Any] | None = None
    ) -> HistoryEntry:
        """Record a handoff between agents on the ticket: from, to, and what the receiving agent was given
        (a history entry beside the compactions; the pinned state goes with the ticket)."""
        return self._run(
            flows.record_handoff(ticket_id, from_agent=from_agent, to_agent=to_agent, given=given)
        )

    def history(self, ticket_id: str, *, page_url: str | None = None, **params: Any) -> HistoryPage:
        """One page of everything that happened to the ticket, newest first."""
        return self._run(flows.history(ticket_id, page_url=page_url, params=params or None))

    def iter_history(self, ticket_id: str) -> Iterator[HistoryEntry]:
        """Every history entry, newest first, following the pages."""
        page = self.history(ticket_id)
        while True:
            yield from page.results
            if not page.next:
                return
            page = self.history(ticket_id, page_url=page.next)


class AsyncDeskClient(_Base):
    """The same API as DeskClient, with `await`. Use as an async context manager, or `await aclose()`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.25,
        max_backoff: float = 5.0,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, retries=retries, backoff=backoff, max_backoff=max_backoff)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=_headers(token, headers), timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncDeskClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, request: flows.Request) -> flows.Reply:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    request.method,
                    request.path,
                    json=request.json,
                    headers=request.headers,
                    params=request.params,
                )
            except httpx.TransportError as exc:
                if attempt > self.policy.retries:
                    raise DeskUnavailable(
                        f"the desk at {self.base_url} could not be reached: {exc!r}", attempts=attempt
                    ) from exc
                await asyncio.sleep(self.policy.delay(attempt))
                continue
            body = _body(response)
            if response.status_code < 400:
                return flows.Reply(response.status_code, response.headers, body, attempt)
            if attempt <= self.policy.retries and self.policy.should_retry_status(response.status_code, body):
                await asyncio.sleep(self.policy.delay(attempt, response.headers.get("Retry-After")))
                continue
            raise error_for(response.status_code, body, text=response.text, attempts=attempt)

    async def _run(self, flow: flows.Flow[flows.T]) -> flows.T:
        return await flows.arun_to_end(flow, self._send)

    async def open_ticket(
        self,
        ticket_id: str,
        *,
        order_id: str,
        seller_type: str,
        ticket_class: str,
        system_prompt: str | None = None,
    ) -> Ticket:
        return await self._run(
            flows.open_ticket(
                ticket_id,
                order_id=order_id,
                seller_type=seller_type,
                ticket_class=ticket_class,
                system_prompt=system_prompt,
            )
        )

    async def get_ticket(self, ticket_id: str) -> Ticket:
        return await self._run(flows.get_ticket(ticket_id))

    async def set_status(self, ticket_id: str, status: str) -> Ticket:
        return await self._run(flows.set_status(ticket_id, status))

    async def append_turn(
        self,
        ticket_id: str,
        *,
        role: str,
        content: str = "",
        tool: str = "",
        args: dict[str, Any] | None = None,
        tool_call_id: str = "",
        boundary: str = "",
        idempotency_key: str | None = None,
    ) -> TurnAnswer:
        return await self._run(
            flows.append_turn(
                ticket_id,
                role=role,
                content=content,
                tool=tool,
                args=args,
                tool_call_id=tool_call_id,
                boundary=boundary,
                idempotency_key=idempotency_key,
            )
        )

    async def context(self, ticket_id: str) -> Context:
        return await self._run(flows.context(ticket_id))

    async def compactions(self, ticket_id: str) -> list[Compaction]:
        return await self._run(flows.compactions(ticket_id))

    async def state(self, ticket_id: str) -> PinnedState:
        return await self._run(flows.get_state(ticket_id))

    async def change_state(
        self,
        ticket_id: str,
        *,
        op: str,
        text: str,
        at_turn: int | None = None,
        version: int | None = None,
        max_attempts: int = 5,
    ) -> PinnedState:
        return await self._run(
            flows.change_state(
                ticket_id, op=op, text=text, at_turn=at_turn, version=version, max_attempts=max_attempts
            )
        )

    async def record_action(
        self,
        ticket_id: str,
        *,
        tool: str,
        item: str = "",
        amount_cents: int = 0,
        at_turn: int | None = None,
        reversible: bool = False,
        args: dict[str, Any] | None = None,
        repeat_of_earlier: bool = False,
        reason: str = "",
        idempotency_key: str | None = None,
    ) -> ActionRecorded:
        return await self._run(
            flows.record_action(
                ticket_id,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                at_turn=at_turn,
                reversible=reversible,
                args=args,
                repeat_of_earlier=repeat_of_earlier,
                reason=reason,
                status=None,
                idempotency_key=idempotency_key,
            )
        )

    async def reserve_intent(
        self,
        ticket_id: str,
        *,
        tool: str,
        item: str = "",
        amount_cents: int = 0,
        at_turn: int | None = None,
        reversible: bool = False,
        args: dict[str, Any] | None = None,
        repeat_of_earlier: bool = False,
        reason: str = "",
        idempotency_key: str | None = None,
        expects: dict[str, int] | None = None,
    ) -> ActionRecorded:
        return await self._run(
            flows.record_action(
                ticket_id,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                at_turn=at_turn,
                reversible=reversible,
                args=args,
                repeat_of_earlier=repeat_of_earlier,
                reason=reason,
                status="intended",
                idempotency_key=idempotency_key,
                expects=expects,
            )
        )

    async def settle_intent(
        self, ticket_id: str, action_id: str, *, succeeded: bool, reason: str = ""
    ) -> ActionRecorded:
        status = "succeeded" if succeeded else "failed"
        if not succeeded and not reason:
            reason = "the tool failed"
        return await self._run(flows.settle_intent(ticket_id, action_id, status=status, reason=reason))

    async def record_handoff(
        self, ticket_id: str, *, from_agent: str, to_agent: str, given: dict[str, Any] | None = None
    ) -> HistoryEntry:
        return await self._run(
            flows.record_handoff(ticket_id, from_agent=from_agent, to_agent=to_agent, given=given)
        )

    async def history(self, ticket_id: str, *, page_url: str | None = None, **params: Any) -> HistoryPage:
        return await self._run(flows.history(ticket_id, page_url=page_url, params=params or None))

    async def iter_history(self, ticket_id: str) -> AsyncIterator[HistoryEntry]:
        page = await self.history(ticket_id)
        while True:
            for entry in page.results:
                yield entry
            if not page.next:
                return
            page = await self.history(ticket_id, page_url=page.next)
