"""Every answer under /api/ that Django itself produces is JSON, and malformed bodies are refused, not read as empty.

The body edges are sent over a real socket to the desk's WSGI application on loopback (wsgiref), as a client
that lies about its Content-Length or sends chunks would.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import connections
from django.test import Client

from tests.browser.desk_data import ensure_roles
from tickets.accounts import create_agent
from tickets.models import TicketClass
from tickets.services.lifecycle import open_ticket

PORT = 8271


def test_a_host_the_desk_does_not_serve_is_a_json_400(db: None) -> None:
    response = Client(HTTP_HOST="evil.example").get("/api/v1/tickets/")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"] == "bad_request"


@pytest.mark.parametrize("path", ["/api/v1/no-such-thing/", "/api/v2/"])
def test_nothing_there_under_the_api_is_a_json_404(db: None, path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_a_page_that_is_not_there_is_still_a_page(db: None) -> None:
    response = Client().get("/no-such-page/")
    assert response.status_code == 404 and "json" not in response["Content-Type"]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def desk_server(transactional_db: None) -> Iterator[tuple[str, str]]:
    ensure_roles()
    token = create_agent(name="edge-bot")
    klass = TicketClass.objects.create(slug="edge", token_budget=8000, compaction_threshold=0.8)
    open_ticket(ticket_id="T-EDGE", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    desk = WSGIHandler()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        try:
            return list(desk(environ, start_response))
        finally:
            connections.close_all()  # the server thread's connection, so the test database can be dropped

    server: WSGIServer = make_server("127.0.0.1", PORT, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield token, "T-EDGE"
    finally:
        server.shutdown()
        server.server_close()


def _raw(request: bytes) -> tuple[int, dict[str, object]]:
    with socket.create_connection(("127.0.0.1", PORT), timeout=10) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)  # the client sent all it will send
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    assert b"application/json" in head, head
    return status, json.loads(body)


def test_a_body_shorter_than_its_content_length_is_a_400(desk_server: tuple[str, str]) -> None:
    token, ticket_id = desk_server
    body = b'{"role": "customer", "content": "hel'
    status, answer = _raw(
        f"POST /api/v1/tickets/{ticket_id}/turns/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Token {token}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n".encode()
        + body
    )
    assert status == 400, answer
    assert "Content-Length" in str(answer["message"])


def test_a_chunked_body_is_refused_with_411_not_read_as_empty(desk_server: tuple[str, str]) -> None:
    token, ticket_id = desk_server
    payload = b'{"role": "customer", "content": "hello"}'
    chunked = f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n\r\n"
    status, answer = _raw(
        f"POST /api/v1/tickets/{ticket_id}/turns/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Token {token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + chunked
    )
    assert status == 411, answer
    assert answer["error"] == "length_required"


def test_a_doubled_slash_before_api_is_answered_in_json(desk_server: tuple[str, str]) -> None:
    """`//api/...` (a client joining a base URL badly) is the API's, answered in JSON (`_raw` checks the type)."""
    status, answer = _raw(b"GET //api/v1/tickets/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status in (401, 404) and answer["error"]
    status, answer = _raw(b"GET //api/v1/no-such-thing/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status == 404 and answer["error"] == "not_found"
