"""`sundry-desk-mcp` driven by the `mcp` SDK's own client, over stdio and over streamable HTTP, against a
live desk: T-40118's refund reserved and settled once, the repeat refused as an MCP tool error naming the
earlier action, the pinned state read as a resource, the refusal in the desk's history; a refused token
ends the server with one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from sundry_desk_client import DeskClient

from tests.clients.conftest import CLIENT_SRC, open_t40118, run_async
from tickets.models import PinnedState, RefusedAttempt, TicketClass

HTTP_PORT = 8261  # this branch's port range (8260-8269)
REFUND = {"tool": "issue_refund", "item": "garden-table", "amount_cents": 4000}


def server_env(desk_url: str, token: str) -> dict[str, str]:
    return {
        "SUNDRY_DESK_URL": desk_url,
        "SUNDRY_DESK_TOKEN": token,
        "PYTHONPATH": str(CLIENT_SRC),
        "PATH": os.environ.get("PATH", ""),
    }


def stdio_params(desk_url: str, token: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "sundry_desk_client.mcp_server"], env=server_env(desk_url, token)
    )


@contextmanager
def http_server(desk_url: str, token: str) -> Iterator[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sundry_desk_client.mcp_server",
            "--transport",
            "streamable-http",
            "--port",
            str(HTTP_PORT),
        ],
        env=server_env(desk_url, token),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(300):  # until it listens (or has exited)
            if process.poll() is not None:
                break
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", HTTP_PORT)) == 0:
                    break
            time.sleep(0.05)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        yield f"http://127.0.0.1:{HTTP_PORT}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def text_of(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


async def t40118_over_mcp(server: Any, ticket_id: str) -> dict[str, Any]:
    async with Client(server) as mcp:
        tools = {tool.name for tool in (await mcp.list_tools()).tools}
        turn = await mcp.call_tool(
            "record_turn",
            {"ticket_id": ticket_id, "role": "customer", "content": "The garden table has a scratched leg."},
        )
        reserved = await mcp.call_tool("reserve_intent", {"ticket_id": ticket_id, **REFUND})
        action_id = json.loads(text_of(reserved))["action"]["id"]
        settled = await mcp.call_tool(
            "settle_intent", {"ticket_id": ticket_id, "action_id": action_id, "succeeded": True}
        )
        again = await mcp.call_tool(
            "reserve_intent", {"ticket_id": ticket_id, **REFUND, "item": "Garden_Table"}
        )
        bad = await mcp.call_tool("change_state", {"ticket_id": ticket_id, "op": "no_such_op", "text": "x"})
        resource = await mcp.read_resource(f"desk://tickets/{ticket_id}/state")
        context = await mcp.call_tool("ticket_context", {"ticket_id": ticket_id})
        return {
            "tools": tools,
            "turn": turn,
            "action_id": action_id,
            "settled": settled,
            "again": again,
            "bad": bad,
            "state": json.loads(resource.contents[0].text),
            "context": json.loads(text_of(context)),
        }


def check_t40118(seen: dict[str, Any], client: DeskClient, ticket_id: str) -> None:
    assert {
        "ticket_context",
        "pinned_state",
        "record_turn",
        "reserve_intent",
        "settle_intent",
        "change_state",
    } <= seen["tools"]
    assert not seen["turn"].is_error and json.loads(text_of(seen["turn"]))["turn"] == 1
    assert not seen["settled"].is_error
    # The repeat is an MCP tool error that names the earlier action.
    again = seen["again"]
    assert again.is_error is True
    text = text_of(again)  # the SDK's "Error executing tool reserve_intent: " then the desk's refusal
    assert text.startswith("Error executing tool reserve_intent")
    refusal = json.loads(text[text.index("{") :])
    assert refusal["error"] == "repeat_refused" and refusal["earlier_action"]["id"] == seen["action_id"]
    assert seen["action_id"] in refusal["note"] and "did NOT run" in refusal["note"]
    assert seen["bad"].is_error is True and "op" in text_of(seen["bad"])
    assert seen["state"]["refunded_cents_total"] == 4000
    assert [a["status"] for a in seen["state"]["actions_taken"]] == ["succeeded"]
    assert seen["context"]["pinned_state"]["refunded_cents_total"] == 4000
    assert PinnedState.objects.get(ticket__ticket_id=ticket_id).items.refunded_cents_total == 4000
    assert RefusedAttempt.objects.filter(ticket__ticket_id=ticket_id).count() == 1
    assert any(e.kind == "refused_attempt" for e in client.iter_history(ticket_id))


def test_t40118_over_stdio(
    client: DeskClient, desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    seen = run_async(t40118_over_mcp(stdio_params(desk_url, desk_token), ticket_id))
    check_t40118(seen, client, ticket_id)


def test_t40118_over_streamable_http(
    client: DeskClient, desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    with http_server(desk_url, desk_token) as url:
        seen = run_async(t40118_over_mcp(url, ticket_id))
    check_t40118(seen, client, ticket_id)


def test_a_bad_token_is_refused_with_one_line(desk_url: str, transactional_db: None) -> None:
    for transport in ("stdio", "streamable-http"):
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "sundry_desk_client.mcp_server",
                "--transport",
                transport,
                "--port",
                str(HTTP_PORT),
            ],
            env=server_env(desk_url, "not-a-token"),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert finished.returncode == 2
        lines = finished.stderr.strip().splitlines()
        assert len(lines) == 1 and "refused SUNDRY_DESK_TOKEN (401" in lines[0], finished.stderr


def test_a_bad_token_over_stdio_never_serves_a_tool(desk_url: str, transactional_db: None) -> None:
    async def connect() -> None:
        async with Client(stdio_params(desk_url, "not-a-token")) as mcp:
            await mcp.list_tools()

    with pytest.raises(Exception):  # noqa: B017 (the server process is gone before the handshake)
        run_async(connect())
