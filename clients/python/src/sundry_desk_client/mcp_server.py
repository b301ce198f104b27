"""The desk as an MCP server (`pip install "sundry-desk-client[mcp]"`, console script `sundry-desk-mcp`).

    SUNDRY_DESK_URL=http://127.0.0.1:8000 SUNDRY_DESK_TOKEN=... sundry-desk-mcp            # stdio
    SUNDRY_DESK_URL=... SUNDRY_DESK_TOKEN=... sundry-desk-mcp --transport streamable-http --port 8765

Tools: `ticket_context` (the assembled context: pinned state, summary, the turns since), `pinned_state`,
`record_turn`, `reserve_intent` and `settle_intent` (an irreversible action reserved before its tool runs,
settled after), `record_action`, `change_state` (constraints, questions, decisions), `set_ticket_status`,
`ticket_history`. The pinned state is also a resource, `desk://tickets/{ticket_id}/state`. A repeat the desk
refuses is a tool error (`isError`) naming the earlier action, as is anything else the desk refuses.

The token is checked against the desk at start: a refused token ends the server with one line on stderr.
Built on the official `mcp` Python SDK (MCPServer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from sundry_desk_client._shared import not_reserved_text, refusal_text
from sundry_desk_client.client import AsyncDeskClient
from sundry_desk_client.errors import DeskError, NotFound, RepeatRefused, Unauthorized

INSTRUCTIONS = (
    "Sundry Desk keeps each support ticket's pinned state (irreversible actions taken, customer constraints, "
    "open questions, decisions) beside its history. Read ticket_context before answering; record every "
    "customer message and your replies with record_turn (boundary 'reply_sent' when you answered the "
    "customer); before an irreversible tool (a refund, a charge, a credit) call reserve_intent, run the tool "
    "only if it succeeds, then settle_intent. A refused reservation means the effect already happened: tell "
    "the customer, do not run the tool."
)
TOKEN_CHECK_TICKET = "sundry-desk-mcp-token-check"


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json") if hasattr(model, "model_dump") else model


def _tool_error(exc: DeskError, tool: str) -> ToolError:
    if isinstance(exc, RepeatRefused):
        return ToolError(refusal_text(exc, tool))
    return ToolError(not_reserved_text(exc, tool) if tool else f"{type(exc).__name__}: {exc}")


def build_server(desk: AsyncDeskClient, *, host: str = "127.0.0.1", port: int = 8765) -> MCPServer:
    """The MCP server over one desk client (its URL and agent token)."""
    server: MCPServer = MCPServer("sundry-desk", instructions=INSTRUCTIONS, version="0.1.0")

    async def call(method: str, *args: Any, guarded_tool: str = "", **kwargs: Any) -> Any:
        try:
            return _dump(await getattr(desk, method)(*args, **kwargs))
        except DeskError as exc:
            raise _tool_error(exc, guarded_tool) from exc

    @server.tool()
    async def ticket_context(ticket_id: str) -> dict[str, Any]:
        """The ticket's assembled context, the request to send the model: the pinned state and the active
        summary first, then the turns since the last compaction, with the token figures."""
        return dict(await call("context", ticket_id))

    @server.tool()
    async def pinned_state(ticket_id: str) -> dict[str, Any]:
        """The ticket's pinned state: actions taken (with refunded_cents_total), customer constraints, open
        questions and decisions. Authoritative: read it before any refund."""
        return dict(await call("state", ticket_id))

    @server.tool()
    async def record_turn(
        ticket_id: str,
        role: str,
        content: str = "",
        tool: str = "",
        args: dict[str, Any] | None = None,
        tool_call_id: str = "",
        boundary: str = "",
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Append a turn: role is customer, agent, tool_call or tool_result. Give boundary 'reply_sent' on
        an agent turn that answered the customer (the desk compacts at boundaries). The answer says what
        compaction did. Reuse idempotency_key when retrying the same turn."""
        return dict(
            await call(
                "append_turn",
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

    @server.tool()
    async def reserve_intent(
        ticket_id: str,
        tool: str,
        item: str = "",
        amount_cents: int = 0,
        args: dict[str, Any] | None = None,
        at_turn: int | None = None,
        repeat_of_earlier: bool = False,
        reason: str = "",
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Reserve an irreversible action (a refund, a charge...) BEFORE running its tool. A second one of
        the same tool on the same item is refused as a tool error naming the earlier action: then do not
        run the tool. On success run the tool and call settle_intent with the action id."""
        return dict(
            await call(
                "reserve_intent",
                ticket_id,
                guarded_tool=tool,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                args=args,
                at_turn=at_turn,
                repeat_of_earlier=repeat_of_earlier,
                reason=reason,
                idempotency_key=idempotency_key,
            )
        )

    @server.tool()
    async def settle_intent(
        ticket_id: str, action_id: str, succeeded: bool, reason: str = ""
    ) -> dict[str, Any]:
        """Settle a reserved intent after its tool ran: succeeded, or failed with a reason (releases the item)."""
        return dict(await call("settle_intent", ticket_id, action_id, succeeded=succeeded, reason=reason))

    @server.tool()
    async def record_action(
        ticket_id: str,
        tool: str,
        item: str = "",
        amount_cents: int = 0,
        args: dict[str, Any] | None = None,
        at_turn: int | None = None,
        reversible: bool = False,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Record an action that already succeeded (prefer reserve_intent before an irreversible one)."""
        return dict(
            await call(
                "record_action",
                ticket_id,
                guarded_tool=tool,
                tool=tool,
                item=item,
                amount_cents=amount_cents,
                args=args,
                at_turn=at_turn,
                reversible=reversible,
                idempotency_key=idempotency_key,
            )
        )

    @server.tool()
    async def change_state(ticket_id: str, op: str, text: str, at_turn: int | None = None) -> dict[str, Any]:
        """Record a state change: op is constraint_stated, question_opened, question_resolved (text = the
        question's id or text) or decision_made. Returns the new pinned state."""
        return dict(await call("change_state", ticket_id, op=op, text=text, at_turn=at_turn))

    @server.tool()
    async def set_ticket_status(ticket_id: str, status: str) -> dict[str, Any]:
        """Move the ticket to open, waiting, resolved or escalated."""
        return dict(await call("set_status", ticket_id, status))

    @server.tool()
    async def ticket_history(ticket_id: str) -> list[dict[str, Any]]:
        """The newest page of everything that happened to the ticket (turns, actions, refusals, compactions,
        handoffs), newest first."""
        page = await call("history", ticket_id)
        return list(page["results"])

    @server.resource(
        "desk://tickets/{ticket_id}/state",
        name="pinned_state",
        description="The ticket's pinned state (JSON), never summarized away.",
        mime_type="application/json",
    )
    async def state_resource(ticket_id: str) -> str:
        return json.dumps(await call("state", ticket_id), ensure_ascii=False)

    return server


async def check_token(desk: AsyncDeskClient) -> str:
    """'' when the desk accepts the token, else the one line to print."""
    try:
        await desk.get_ticket(TOKEN_CHECK_TICKET)
    except NotFound:
        return ""
    except Unauthorized as exc:
        return f"sundry-desk-mcp: the desk at {desk.base_url} refused SUNDRY_DESK_TOKEN ({exc.status}: {exc.message})"
    except DeskError as exc:
        return f"sundry-desk-mcp: the desk at {desk.base_url} could not be used: {exc}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sundry-desk-mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="streamable-http: the address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="streamable-http: the port")
    options = parser.parse_args(argv)
    url = os.environ.get("SUNDRY_DESK_URL", "http://127.0.0.1:8000")
    token = os.environ.get("SUNDRY_DESK_TOKEN", "")
    if not token:
        print(
            "sundry-desk-mcp: set SUNDRY_DESK_TOKEN (python manage.py create_agent NAME prints one)",
            file=sys.stderr,
        )
        return 2
    problem = asyncio.run(_check(url, token))
    if problem:
        print(problem, file=sys.stderr)
        return 2
    desk = AsyncDeskClient(url, token, retries=2)
    server = build_server(desk)
    if options.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=options.host, port=options.port)
    return 0


async def _check(url: str, token: str) -> str:
    async with AsyncDeskClient(url, token, retries=1, backoff=0.05) as desk:
        return await check_token(desk)


if __name__ == "__main__":
    raise SystemExit(main())
