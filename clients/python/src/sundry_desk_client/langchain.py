"""The desk inside LangChain v1 / LangGraph agents (`pip install "sundry-desk-client[langchain]"`).

    agent = create_agent(model, tools=[issue_refund, track_parcel], middleware=[DeskMiddleware(client)])
    agent.invoke({"messages": [HumanMessage("...")]}, {"configurable": {"thread_id": "T-40118"}})

`DeskMiddleware` makes the desk the agent's memory and its guard; the thread id is the ticket id (or pass
`ticket_id=`), and the ticket must exist:

- before each model call the message list is replaced with the desk's assembled context (pinned state and
  the active summary first, then the turns since the last compaction), so a long conversation is compacted
  in the desk, checked against the pinned state and reviewed there, not in the agent;
- every new message of the graph is posted as a desk turn, in order (before the next model call and when the
  agent finishes); an answer to the customer (an AI message without tool calls) carries the boundary
  `reply_sent`, so the desk may compact there;
- the tools listed in `irreversible_tools` (by default the desk's default refund/charge/credit names) are
  wrapped: an intent is reserved before the tool runs and settled after it; a repeat the desk refuses never
  runs, and the model gets the refusal (naming the earlier action) as the tool's result.

Works with `invoke` (a `DeskClient`) and with `ainvoke`/`astream` (a `DeskClient` or an `AsyncDeskClient`).
A checkpointer is not needed: the desk keeps the conversation.

One module at about 400 lines: one middleware and its hooks, in the order a run calls them.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from sundry_desk_client._flows import new_key
from sundry_desk_client._shared import (
    is_reasoning,
    json_safe,
    not_reserved_text,
    refusal_text,
    stable_key,
    state_text,
    summary_text,
)
from sundry_desk_client.client import AsyncDeskClient, DeskClient
from sundry_desk_client.errors import DeskError, RepeatRefused
from sundry_desk_client.models import Context, TurnAnswer

logger = logging.getLogger("sundry_desk_client")

AnyClient = DeskClient | AsyncDeskClient

# The desk's default irreversible tools (a ticket class's default list, globs allowed; a copy of
# core.identity.DEFAULT_IRREVERSIBLE_TOOLS, pinned equal by tests/clients/test_catalog_defaults.py); a class may list
# others: pass the same list as `irreversible_tools`.
DEFAULT_IRREVERSIBLE_TOOLS: tuple[str, ...] = (
    "issue_refund",
    "refund",
    "partial_refund",
    "refund_*",
    "*_refund",
    "cancel",
    "cancel_*",
    "charge",
    "charge_*",
    "issue_credit",
    "issue_store_credit",
    "issue_gift_card",
    "send_certificate",
    "return_delivered_order_items",
    "exchange_delivered_order_items",
    "modify_pending_order_*",
    "book_reservation",
    "update_reservation_*",
)


def _turn_key(ticket: str, ident: str, body: dict[str, Any]) -> str:
    """The same message posted again (a re-run graph step) is answered from the desk's record; a message
    id a model server reuses for another answer (some number responses per process) is a new turn."""
    return stable_key("lc", ticket, ident, json.dumps(body, sort_keys=True, default=str))


class DeskState(AgentState[Any]):
    """The agent state plus how many of its messages the desk already has."""

    # (mypy reads AgentState as Any, so it does not see a TypedDict here)
    desk_posted: NotRequired[int]  # type: ignore[valid-type,unused-ignore]


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            pieces.append(part["text"])
    return "\n".join(p for p in pieces if p)


def messages_to_turns(
    messages: Sequence[BaseMessage], *, reply_boundary: str = "reply_sent"
) -> list[tuple[str, dict[str, Any]]]:
    """LangChain messages as desk turn bodies, each with a stable part of its Idempotency-Key.

    Human -> customer; AI text -> agent (with `reply_boundary` when the message calls no tool: it answered
    the customer), each of its tool calls -> tool_call; Tool -> tool_result; system messages are the agent's
    instructions, not the ticket's history.
    """
    turns: list[tuple[str, dict[str, Any]]] = []
    for index, message in enumerate(messages):
        ident = message.id or f"index-{index}"
        if isinstance(message, HumanMessage):
            text = _text(message)
            if text.strip():
                turns.append((ident, {"role": "customer", "content": text}))
        elif isinstance(message, AIMessage):
            text = _text(message)
            calls = list(message.tool_calls)
            if text.strip():
                boundary = "" if calls else reply_boundary
                turns.append((ident, {"role": "agent", "content": text, "boundary": boundary}))
            for n, tool_call in enumerate(calls):
                turns.append(
                    (
                        f"{ident}-call-{n}",
                        {
                            "role": "tool_call",
                            "tool": tool_call["name"],
                            "args": json_safe(tool_call.get("args") or {}),
                            "tool_call_id": tool_call.get("id") or "",
                        },
                    )
                )
        elif isinstance(message, ToolMessage):
            turns.append(
                (
                    ident,
                    {
                        "role": "tool_result",
                        "content": _text(message),
                        "tool": message.name or "",
                        "tool_call_id": message.tool_call_id or "",
                    },
                )
            )
    return turns


def context_to_messages(context: Context) -> list[AnyMessage]:
    """The desk's assembled context as LangChain messages: the pinned state and the active summary as system
    messages, then the turns since the last compaction. Each call id carries its desk turn number
    (`call_1~t6`), so a model server that reuses `call_1` never collides with the history; a result answers
    its call by id, or without one the oldest unanswered call of its tool, as the desk pairs them."""
    out: list[AnyMessage] = [SystemMessage(state_text(context))]
    summary = summary_text(context)
    if summary is not None:
        out.append(SystemMessage(summary))
    open_calls: list[tuple[str, str, str]] = []  # (desk id, tool, id given to the model)
    for turn in context.turns:
        if turn.role == "customer":
            out.append(HumanMessage(turn.content))
        elif turn.role == "agent":
            if not is_reasoning(turn):
                out.append(AIMessage(turn.content))
        elif turn.role == "tool_call":
            given = f"{turn.tool_call_id or 'desk'}~t{turn.number}"
            open_calls.append((turn.tool_call_id, turn.tool, given))
            call = {"name": turn.tool, "args": turn.args if isinstance(turn.args, dict) else {}, "id": given}
            last = out[-1]
            if isinstance(last, AIMessage):
                # the calls of one model answer (and the text said with them) are one message
                out[-1] = AIMessage(content=last.content, tool_calls=[*last.tool_calls, call])
            else:
                out.append(AIMessage(content="", tool_calls=[call]))
        elif turn.role == "tool_result":
            match = None
            for index, (desk_id, tool, _given) in enumerate(open_calls):
                if (turn.tool_call_id and desk_id == turn.tool_call_id) or (
                    not turn.tool_call_id and (not turn.tool or tool == turn.tool)
                ):
                    match = index
                    break
            if match is None:
                logger.info(
                    "DeskMiddleware: turn %s answers a call outside the context; left out", turn.number
                )
                continue
            _desk_id, tool, given = open_calls.pop(match)
            out.append(ToolMessage(content=turn.content, tool_call_id=given, name=tool or None))
    return out


class DeskMiddleware(AgentMiddleware[DeskState, Any, Any]):
    """LangChain v1 agent middleware backed by a desk ticket. See the module's docstring."""

    state_schema = DeskState

    def __init__(
        self,
        client: AnyClient,
        *,
        ticket_id: str | None = None,
        irreversible_tools: Iterable[str] = DEFAULT_IRREVERSIBLE_TOOLS,
        item_arg: str = "item",
        amount_arg: str = "amount_cents",
        reply_boundary: str = "reply_sent",
    ) -> None:
        super().__init__()
        self.client = client
        self.ticket_id = ticket_id
        self.irreversible_tools = tuple(irreversible_tools)
        self.item_arg = item_arg
        self.amount_arg = amount_arg
        self.reply_boundary = reply_boundary
        self.turn_answers: list[TurnAnswer] = []
        """The desk's answers to the turns this middleware posted (with what compaction did on each)."""

    # ------------------------------------------------------------ plumbing

    def _ticket(self, config: Any = None) -> str:
        if self.ticket_id:
            return self.ticket_id
        config = config if config is not None else get_config()
        thread = (config or {}).get("configurable", {}).get("thread_id")
        if not thread:
            raise ValueError(
                "DeskMiddleware needs a ticket: pass ticket_id=, or invoke the agent with "
                '{"configurable": {"thread_id": "<ticket id>"}}'
            )
        return str(thread)

    def _sync_client(self) -> DeskClient:
        if not isinstance(self.client, DeskClient):
            raise TypeError("an AsyncDeskClient works with ainvoke/astream; use a DeskClient with invoke")
        return self.client

    async def _acall(self, method: str, *args: Any, **kwargs: Any) -> Any:
        bound = getattr(self.client, method)
        if isinstance(self.client, AsyncDeskClient):
            return await bound(*args, **kwargs)
        return await asyncio.to_thread(bound, *args, **kwargs)

    def _pending(self, state: DeskState) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        messages = state.get("messages", [])
        posted = min(int(state.get("desk_posted", 0) or 0), len(messages))
        return messages_to_turns(messages[posted:], reply_boundary=self.reply_boundary), len(messages)

    # ------------------------------------------------------------ turns: new messages -> the desk

    def _post(self, state: DeskState) -> dict[str, Any] | None:
        turns, count = self._pending(state)
        if count == int(state.get("desk_posted", 0) or 0):
            return None
        ticket = self._ticket()
        client = self._sync_client()
        for ident, body in turns:
            answer = client.append_turn(ticket, idempotency_key=_turn_key(ticket, ident, body), **body)
            self.turn_answers.append(answer)
        return {"desk_posted": count}

    async def _apost(self, state: DeskState) -> dict[str, Any] | None:
        turns, count = self._pending(state)
        if count == int(state.get("desk_posted", 0) or 0):
            return None
        ticket = self._ticket()
        for ident, body in turns:
            answer = await self._acall(
                "append_turn", ticket, idempotency_key=_turn_key(ticket, ident, body), **body
            )
            self.turn_answers.append(answer)
        return {"desk_posted": count}

    def before_model(self, state: DeskState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._post(state)

    async def abefore_model(self, state: DeskState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return await self._apost(state)

    def after_agent(self, state: DeskState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._post(state)

    async def aafter_agent(self, state: DeskState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return await self._apost(state)

    # ------------------------------------------------------------ the model reads the desk's context

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        context = self._sync_client().context(self._ticket())
        return handler(request.override(messages=context_to_messages(context)))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        context = await self._acall("context", self._ticket())
        return await handler(request.override(messages=context_to_messages(context)))

    # ------------------------------------------------------------ irreversible tools: reserve, run, settle

    def guards(self, tool: str) -> bool:
        """Whether `tool` is one of `irreversible_tools` (names or globs, compared case-insensitively)."""
        name = tool.casefold().replace("-", "_")
        return any(fnmatch.fnmatchcase(name, p.casefold()) for p in self.irreversible_tools)

    def _intent(self, request: ToolCallRequest, ticket: str) -> dict[str, Any]:
        call = request.tool_call
        args = dict(call.get("args") or {})
        item = args.get(self.item_arg, "")
        amount = args.get(self.amount_arg, 0)
        return {
            "tool": call["name"],
            "item": "" if item is None else str(item),
            "amount_cents": int(amount or 0),
            "args": json_safe(args),
            # A fresh key per tool call (the client's retries reuse it): a model server that reuses a call id
            # for a second, identical refund must meet the guard, not the first reservation's replay.
            "idempotency_key": new_key(f"lc-{call['name']}"[:60]),
        }

    def _answer(self, request: ToolCallRequest, text: str) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(content=text, tool_call_id=call.get("id") or "", name=call["name"], status="error")

    @staticmethod
    def _failed(result: ToolMessage | Command[Any]) -> str:
        if isinstance(result, ToolMessage) and result.status == "error":
            return _text(result)[:2000] or "the tool answered an error"
        return ""

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        if not self.guards(request.tool_call["name"]):
            return handler(request)
        ticket = self._ticket(getattr(request.runtime, "config", None))
        client = self._sync_client()
        try:
            reserved = client.reserve_intent(ticket, **self._intent(request, ticket))
        except RepeatRefused as exc:
            return self._answer(request, refusal_text(exc, request.tool_call["name"]))
        except DeskError as exc:
            return self._answer(request, not_reserved_text(exc, request.tool_call["name"]))
        try:
            result = handler(request)
        except Exception as exc:
            self._settle(client.settle_intent, ticket, reserved.action.id, f"{type(exc).__name__}: {exc}")
            raise
        self._settle(client.settle_intent, ticket, reserved.action.id, self._failed(result))
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if not self.guards(request.tool_call["name"]):
            return await handler(request)
        ticket = self._ticket(getattr(request.runtime, "config", None))
        try:
            reserved = await self._acall("reserve_intent", ticket, **self._intent(request, ticket))
        except RepeatRefused as exc:
            return self._answer(request, refusal_text(exc, request.tool_call["name"]))
        except DeskError as exc:
            return self._answer(request, not_reserved_text(exc, request.tool_call["name"]))
        try:
            result = await handler(request)
        except Exception as exc:
            await self._asettle(ticket, reserved.action.id, f"{type(exc).__name__}: {exc}")
            raise
        await self._asettle(ticket, reserved.action.id, self._failed(result))
        return result

    @staticmethod
    def _settle(settle: Callable[..., Any], ticket: str, action_id: str, failure: str) -> None:
        try:
            settle(ticket, action_id, succeeded=not failure, reason=failure[:2000])
        except Exception:
            # The intent stays reserved at the desk (which keeps refusing a repeat) until a supervisor
            # settles it; the tool's own result or error is not hidden for this.
            logger.exception("could not settle intent %s on ticket %s", action_id, ticket)

    async def _asettle(self, ticket: str, action_id: str, failure: str) -> None:
        try:
            await self._acall(
                "settle_intent", ticket, action_id, succeeded=not failure, reason=failure[:2000]
            )
        except Exception:
            logger.exception("could not settle intent %s on ticket %s", action_id, ticket)
