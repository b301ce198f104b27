"""The desk inside the OpenAI Agents SDK (`pip install "sundry-desk-client[agents]"`).

- `DeskSession(ticket_id, client=...)`: a Session whose history is the desk's ticket. `add_items` stores the
  SDK's items as desk turns; `get_items` gives back the desk's assembled context (pinned state and the
  active summary first, then the turns since the last compaction), so compaction happens in the desk,
  where it is checked against the pinned state and reviewed, not in the agent.
- `guarded(fn, client=..., ticket_id=...)`: a function tool whose irreversible effect is reserved with the
  desk before `fn` runs; a repeat the desk refuses never runs, and the model is told why.

Both take a `DeskClient` or an `AsyncDeskClient`; the ticket must exist before they are used.

One module although over 400 lines: the SDK's Session, its guarded tool and its handoff hooks share
the ticket's context and the refusal texts (`_shared.py` holds what the LangChain middleware shares too).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast, get_type_hints

from agents import (
    FunctionTool,
    RunContextWrapper,
    RunHooks,
    SessionSettings,
    TResponseInputItem,
    function_tool,
)
from agents.tool_context import ToolContext

from sundry_desk_client._flows import new_key
from sundry_desk_client._shared import (
    is_reasoning,
    json_safe,
    not_reserved_text,
    refusal_text,
    state_text,
    summary_text,
)
from sundry_desk_client.client import AsyncDeskClient, DeskClient
from sundry_desk_client.errors import BeliefStale, DeskError, RepeatRefused
from sundry_desk_client.models import Context, TurnAnswer

# The money totals of the pinned state: what an agent's belief (`expects`) is made of.
MONEY_TOTALS = ("refunded_cents_total", "charged_cents_total", "credited_cents_total")

logger = logging.getLogger("sundry_desk_client")

AnyClient = DeskClient | AsyncDeskClient

REASONING_MARK = {"sdk_item": "reasoning"}
RAW_ARGUMENTS = "__raw_arguments__"
CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})


class AppendOnlyError(NotImplementedError):
    """The desk's record is append-only: turns are never removed (SPEC: nobody can delete a turn)."""


async def _call(client: AnyClient, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call a client method the same way whether the client is blocking or async."""
    bound = getattr(client, method)
    if isinstance(client, AsyncDeskClient):
        return await bound(*args, **kwargs)
    return await asyncio.to_thread(bound, *args, **kwargs)


# ---------------------------------------------------------------- SDK items -> desk turns


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return cast(dict[str, Any], dump(exclude_unset=True))
    return dict(item)


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts (text parts joined, others named)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            part = _as_dict(part) if not isinstance(part, str) else part
            if isinstance(part, str):
                pieces.append(part)
                continue
            kind = part.get("type", "")
            text = part.get("text")
            if text is None:
                text = part.get("refusal")
            if isinstance(text, str):
                pieces.append(text)
            elif kind:
                name = part.get("filename") or part.get("file_id") or ""
                pieces.append(f"[{kind}{': ' + name if name else ''}]")
        return "\n".join(p for p in pieces if p)
    return json.dumps(content, ensure_ascii=False, default=str)


def _arguments_to_args(arguments: Any) -> dict[str, Any]:
    """A function call's `arguments` (a JSON string) as the desk's args object; what is not a JSON object
    is kept verbatim under RAW_ARGUMENTS so get_items gives it back unchanged."""
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or arguments == "":
        return {}
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        return {RAW_ARGUMENTS: str(arguments)}
    return parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS: str(arguments)}


def items_to_turns(
    items: Sequence[Any], *, reply_boundary: str = "reply_sent", call_tools: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Map SDK input items to desk turn bodies (role, content, tool, args, tool_call_id, boundary).

    - user message -> customer; assistant message -> agent, with `reply_boundary` when nothing later in the
      same batch is a tool call (the assistant answered the customer);
    - function_call -> tool_call (tool name, parsed arguments, call_id); function_call_output -> tool_result
      (its text; the tool name from the call with the same call_id when known);
    - reasoning -> an agent turn holding the reasoning summary (no boundary; skipped when it has no text);
    - system/developer messages are the agent's instructions, not the ticket's history: not stored.
    Other item types (hosted tools, handoffs) are stored as tool_call/tool_result when they carry a call_id.
    """
    call_tools = call_tools if call_tools is not None else {}
    dicts = [_as_dict(item) for item in items]
    turns: list[dict[str, Any]] = []
    for index, item in enumerate(dicts):
        kind = item.get("type") or ("message" if "role" in item else "")
        role = item.get("role")
        if kind == "message" and role == "user":
            text = _text_of(item.get("content"))
            if text.strip():
                turns.append({"role": "customer", "content": text})
        elif kind == "message" and role == "assistant":
            text = _text_of(item.get("content"))
            if not text.strip():
                continue
            later_call = any(
                (d.get("type") in CALL_TYPES) or str(d.get("type", "")).endswith("_call")
                for d in dicts[index + 1 :]
            )
            turns.append({"role": "agent", "content": text, "boundary": "" if later_call else reply_boundary})
        elif kind == "message":
            continue  # system / developer: instructions, not history
        elif kind == "reasoning":
            text = _text_of(item.get("summary")) or _text_of(item.get("content"))
            if text.strip():
                turns.append({"role": "agent", "content": text, "args": dict(REASONING_MARK)})
        elif kind in CALL_TYPES:
            call_id = str(item.get("call_id") or "")
            name = str(item.get("name") or kind)
            if call_id:
                call_tools[call_id] = name
            raw = item.get("arguments") if kind == "function_call" else item.get("input")
            turns.append(
                {"role": "tool_call", "tool": name, "args": _arguments_to_args(raw), "tool_call_id": call_id}
            )
        elif kind in OUTPUT_TYPES:
            call_id = str(item.get("call_id") or "")
            turns.append(
                {
                    "role": "tool_result",
                    "content": _text_of(item.get("output")),
                    "tool": call_tools.get(call_id, ""),
                    "tool_call_id": call_id,
                }
            )
        elif str(kind).endswith("_call_output") or str(kind).endswith("_output"):
            call_id = str(item.get("call_id") or item.get("id") or "")
            turns.append(
                {
                    "role": "tool_result",
                    "content": _text_of(item.get("output")),
                    "tool": call_tools.get(call_id, ""),
                    "tool_call_id": call_id,
                }
            )
        elif str(kind).endswith("_call"):
            call_id = str(item.get("call_id") or item.get("id") or "")
            if call_id:
                call_tools[call_id] = str(kind)
            details = {k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")}
            turns.append(
                {
                    "role": "tool_call",
                    "tool": str(kind),
                    "args": json.loads(json.dumps(details, default=str)),
                    "tool_call_id": call_id,
                }
            )
        else:
            logger.warning("DeskSession: an item of type %r has no desk turn; not stored", kind)
    return turns


# ---------------------------------------------------------------- desk context -> SDK items


def _state_message(context: Context, role: str) -> dict[str, Any]:
    return {"role": role, "content": state_text(context)}


def _summary_message(context: Context, role: str) -> dict[str, Any] | None:
    text = summary_text(context)
    return None if text is None else {"role": role, "content": text}


_is_reasoning = is_reasoning


def context_to_items(context: Context, *, state_role: str = "system") -> list[dict[str, Any]]:
    """The desk's assembled context as SDK input items.

    Pinned state and the active summary come first (as `state_role` messages), then the turns since the
    last compaction: customer -> user, agent -> assistant, tool_call -> function_call, tool_result ->
    function_call_output. Reasoning turns stay in the desk (for supervisors and the summarizer) and are not
    replayed. Every call id carries its desk turn number (`call_1~t6`): a model server that reuses `call_1`
    in a later run would otherwise collide with history, and the SDK merges items that share a call id. A
    result without an id answers the oldest unanswered call of its tool, as the desk pairs them; a result
    whose call is not in the context is left out (the desk never cuts between the two).
    """
    items: list[dict[str, Any]] = [_state_message(context, state_role)]
    summary = _summary_message(context, state_role)
    if summary is not None:
        items.append(summary)
    open_calls: list[tuple[str, str, str]] = []  # (original id, tool, id given to the SDK), oldest first
    for turn in context.turns:
        if turn.role == "customer":
            items.append({"type": "message", "role": "user", "content": turn.content})
        elif turn.role == "agent":
            if not _is_reasoning(turn):
                items.append({"type": "message", "role": "assistant", "content": turn.content})
        elif turn.role == "tool_call":
            original = turn.tool_call_id
            given = f"{original or 'desk'}~t{turn.number}"
            open_calls.append((original, turn.tool, given))
            args = turn.args if isinstance(turn.args, dict) else {}
            arguments = args[RAW_ARGUMENTS] if RAW_ARGUMENTS in args else json.dumps(args, ensure_ascii=False)
            items.append(
                {"type": "function_call", "call_id": given, "name": turn.tool, "arguments": arguments}
            )
        elif turn.role == "tool_result":
            match = None
            for index, (original, tool, _given) in enumerate(open_calls):
                if turn.tool_call_id:
                    if original == turn.tool_call_id:
                        match = index
                        break
                elif not turn.tool or tool == turn.tool:
                    match = index
                    break
            if match is None:
                logger.info("DeskSession: turn %s answers a call outside the context; left out", turn.number)
                continue
            _original, _tool, given = open_calls.pop(match)
            items.append({"type": "function_call_output", "call_id": given, "output": turn.content})
    return items


# ---------------------------------------------------------------- the session


class DeskSession:
    """An Agents SDK Session backed by a desk ticket (the ticket id is the session id).

    `Runner.run(agent, "...", session=DeskSession("T-40118", client=client))` stores every item of the run
    as a desk turn and starts every run from the desk's assembled context. `turn_answers` keeps the desk's
    answers to the turns this session posted (with what compaction did on each).
    """

    def __init__(
        self,
        ticket_id: str,
        *,
        client: AnyClient,
        reply_boundary: str = "reply_sent",
        state_role: str = "system",
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = ticket_id
        self.ticket_id = ticket_id
        self.client = client
        self.reply_boundary = reply_boundary
        self.state_role = state_role
        self.session_settings = session_settings
        self.turn_answers: list[TurnAnswer] = []
        # The money totals of the state in the context last handed to the model: what the agent believes.
        self.money_believed: dict[str, int] | None = None
        self._call_tools: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The desk's assembled context as input items; with `limit`, its latest `limit` items."""
        context: Context = await _call(self.client, "context", self.ticket_id)
        state = context.pinned_state.agent_json()
        self.money_believed = {name: state[name] for name in MONEY_TOTALS if isinstance(state.get(name), int)}
        items = context_to_items(context, state_role=self.state_role)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store the items as desk turns, in order (each with its own Idempotency-Key, reused on retries)."""
        turns = items_to_turns(items, reply_boundary=self.reply_boundary, call_tools=self._call_tools)
        async with self._lock:
            for turn in turns:
                answer: TurnAnswer = await _call(
                    self.client, "append_turn", self.ticket_id, idempotency_key=new_key("sdk"), **turn
                )
                self.turn_answers.append(answer)

    def belief(self) -> dict[str, int] | None:
        """The money totals of the state the model was last given (for `guarded(..., expects=session.belief)`);
        None before the first context was read."""
        return None if self.money_believed is None else dict(self.money_believed)

    async def pop_item(self) -> TResponseInputItem | None:
        """Not possible: the desk never removes a turn. Raises AppendOnlyError (the SDK treats a failed
        pop as "cannot rewind" and carries on)."""
        raise AppendOnlyError(
            f"ticket {self.ticket_id}: the desk's turns are append-only, so the latest item cannot be removed; "
            "append a correcting turn instead"
        )

    async def clear_session(self) -> None:
        """Not possible: a ticket's record is never deleted. Raises AppendOnlyError; open a new ticket for a
        fresh conversation (the desk compacts a long one by itself)."""
        raise AppendOnlyError(
            f"ticket {self.ticket_id}: the desk keeps every turn; open a new ticket for a fresh conversation"
        )


class DeskHandoffHooks(RunHooks[Any]):
    """Run hooks that record every SDK handoff on the session's ticket (from, to, and what the receiving
    agent was given: the desk's assembled context, whose pinned state no handoff filter drops).

        Runner.run(triage, "...", session=session, hooks=DeskHandoffHooks(session))
    """

    def __init__(self, session: DeskSession) -> None:
        self.session = session
        self.recorded: list[Any] = []

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Any, to_agent: Any) -> None:
        session = self.session
        try:
            desk_context: Context = await _call(session.client, "context", session.ticket_id)
            turns = [t.number for t in desk_context.turns]
            given = {
                "source": "openai-agents handoff",
                "pinned_state_version": desk_context.pinned_state.version,
                "summary": desk_context.summary is not None,
                "turns": [turns[0], turns[-1]] if turns else [],
            }
            entry = await _call(
                session.client,
                "record_handoff",
                session.ticket_id,
                from_agent=str(getattr(from_agent, "name", from_agent)),
                to_agent=str(getattr(to_agent, "name", to_agent)),
                given=given,
            )
            self.recorded.append(entry)
        except DeskError:
            # The handoff itself goes on; the desk's record of it is what is missing (logged).
            logger.exception("could not record the handoff on ticket %s", session.ticket_id)


# ---------------------------------------------------------------- guarded tools


_json_safe = json_safe
_refusal = refusal_text
_not_reserved = not_reserved_text


def _stale_belief(exc: BeliefStale, tool: str) -> str:
    return json.dumps(
        {
            "refused": True,
            "error": "belief_stale",
            "message": exc.message,
            "actions": exc.body.get("actions", []),
            "note": f"{tool} did NOT run: the ticket's money is not what you were told; re-read the state.",
        },
        ensure_ascii=False,
    )


def guarded(
    fn: Callable[..., Any],
    *,
    client: AnyClient,
    ticket_id: str,
    item_arg: str = "item",
    amount_arg: str = "amount_cents",
    reversible: bool = False,
    expects: Callable[[], dict[str, int] | None] | dict[str, int] | None = None,
    **tool_options: Any,
) -> FunctionTool:
    """`fn` as an Agents SDK function tool (same name, docstring and parameters), guarded by the desk.

    Before `fn` runs, an intent is reserved (tool = fn's name, item and amount from the arguments named
    `item_arg` and `amount_arg`, the other arguments as its args). If the desk refuses it as a repeat, `fn`
    does not run and the model receives the refusal, naming the earlier action; if the desk cannot reserve
    it (a bad argument, the desk unreachable after retries), `fn` does not run either and the model is told
    what the desk said. Otherwise `fn` runs and the
    intent is settled: succeeded, or failed (with the exception) if `fn` raised, which releases the item;
    the exception then goes to the SDK as any tool error does. `tool_options` go to `function_tool`.

    `expects` is the agent's belief about the ticket's money, sent with the intent: a dict, or a callable
    read at each call; `session.belief` of the run's DeskSession sends the totals of the state the model was
    given, so an agent that lost a refund from its context is stopped (belief_stale) whatever it calls the item.
    """
    signature = inspect.signature(fn)
    hints = get_type_hints(fn, include_extras=True)
    tool_name = fn.__name__
    context_name = "_desk_tool_context"
    if context_name in signature.parameters:
        raise ValueError(f"{tool_name} has a parameter named {context_name}, which guarded() needs")

    async def run(*args: Any, **kwargs: Any) -> Any:
        context = kwargs.pop(context_name)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        item = arguments.get(item_arg, "")
        amount = arguments.get(amount_arg, 0)
        call_id = getattr(context, "tool_call_id", "") or ""
        try:
            reserved = await _call(
                client,
                "reserve_intent",
                ticket_id,
                tool=tool_name,
                item="" if item is None else str(item),
                amount_cents=int(amount or 0),
                reversible=reversible,
                args=_json_safe(arguments),
                idempotency_key=new_key(f"{tool_name}-{call_id}"[:80]),
                expects=expects() if callable(expects) else expects,
            )
        except RepeatRefused as exc:
            return _refusal(exc, tool_name)
        except BeliefStale as exc:
            return _stale_belief(exc, tool_name)
        except DeskError as exc:
            return _not_reserved(exc, tool_name)
        action_id = reserved.action.id
        try:
            if inspect.iscoroutinefunction(fn):
                result = await fn(*bound.args, **bound.kwargs)
            else:
                result = await asyncio.to_thread(fn, *bound.args, **bound.kwargs)
        except Exception as exc:
            await _settle(action_id, succeeded=False, reason=f"{type(exc).__name__}: {exc}"[:2000])
            raise
        await _settle(action_id, succeeded=True, reason="")
        return result

    async def _settle(action_id: str, *, succeeded: bool, reason: str) -> None:
        try:
            await _call(client, "settle_intent", ticket_id, action_id, succeeded=succeeded, reason=reason)
        except Exception:
            # The effect's outcome is known; the intent stays reserved at the desk (which keeps refusing a
            # repeat) until a supervisor settles it. Do not hide the tool's own result or error for this.
            logger.exception("could not settle intent %s on ticket %s", action_id, ticket_id)

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        # The SDK passes the ToolContext first; keep it out of fn's arguments.
        context, *rest = args
        return await run(*rest, **kwargs, **{context_name: context})

    # Not functools.wraps: its __wrapped__ would lead the SDK to fn's signature, without the context.
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attribute, getattr(fn, attribute, None))
    context_param = inspect.Parameter(
        context_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext[Any]
    )
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[context_param, *params],
        return_annotation=hints.get("return", signature.return_annotation),
    )
    wrapper.__annotations__ = {context_name: ToolContext[Any], **hints}
    return function_tool(wrapper, name_override=tool_name, **tool_options)


def guarded_tools(
    fns: Iterable[Callable[..., Any]], *, client: AnyClient, ticket_id: str, **options: Any
) -> list[FunctionTool]:
    """`guarded` for several functions with the same client, ticket and options."""
    return [guarded(fn, client=client, ticket_id=ticket_id, **options) for fn in fns]
