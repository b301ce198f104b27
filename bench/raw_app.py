"""R and R': a bare WSGI app over psycopg, one connection per process, no Django.

The reads (state, context) are R, the floor under any framework: hand-written SQL and json.dumps; the state's
actions are read as the desk's reads read them, their rows' served texts joined by string_agg in order (the
agent's for the state, the model's for the context), the totals from the actions' figures. The writes
(turn POST, action POST with or without "status": "intended", settle PATCH) are R', the desk's exact statements
(bench/raw_writes.py). `gunicorn bench.raw_app:app` with BENCH_RAW_DSN set. Authentication is one query on the
token table with the agent role, as the desk's is, and the key's digest compared in Python.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from bench import raw_writes
from core.identity import ToolCatalog
from core.state import MONEY_TOTALS, ActionFigures

REPLY_PRIMING_TOKENS = 3
ROUTE = re.compile(r"^/api/v1/tickets/([^/]+)/(state|context|turns|actions)/(?:([^/]+)/)?$")
_connection: psycopg.Connection[Any] | None = None

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _conn() -> psycopg.Connection[Any]:
    global _connection
    if _connection is None or _connection.closed:
        # Autocommit, as Django runs: a read or a not-due turn is one statement, its own transaction; the other
        # writes open theirs (BEGIN ... COMMIT), as the desk's atomic blocks do.
        _connection = psycopg.connect(os.environ["BENCH_RAW_DSN"], autocommit=True)
    return _connection


def _answer(
    start: StartResponse, status: str, body: Any, extra: list[tuple[str, str]] | None = None
) -> list[bytes]:
    data = json.dumps(body, separators=(",", ":")).encode()
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *(extra or [])])
    return [data]


def _state(
    ticket_id: str,
    order_id: str,
    seller_type: str,
    version: int,
    data: dict[str, Any],
    actions_text: str | None,
    figures: dict[str, list[int]],
    irreversible: Any,
    money: Any,
) -> dict[str, Any]:
    """The agent-facing state from its row: the text lists of `data`, the actions from their rows' served
    texts joined in order (the model's, for the context), the totals from the actions' figures."""
    totals = ActionFigures(figures).totals(ToolCatalog.build(irreversible=irreversible, money=money))
    return {
        "ticket": ticket_id,
        "order": order_id,
        "seller_type": seller_type,
        "version": version,
        "actions_taken": json.loads(f"[{actions_text or ''}]"),
        "customer_constraints": data.get("customer_constraints", []),
        "open_questions": data.get("open_questions", []),
        "decisions": data.get("decisions", []),
        **{name: totals[name] for name in MONEY_TOTALS},
    }


AUTH_SQL = """
SELECT k.digest, k.user_id, EXISTS(SELECT 1 FROM auth_user_groups ug JOIN auth_group g ON g.id = ug.group_id
  WHERE g.name = 'agent' AND ug.user_id = k.user_id)
FROM tickets_agenttoken k JOIN auth_user u ON u.id = k.user_id
WHERE k.prefix = %s AND k.revoked_at IS NULL AND u.is_active ORDER BY k.created_at DESC LIMIT 1
"""


# Live keys this process authenticated, for 5 s: the desk's TokenCache (SUNDRY_AUTH_CACHE_SECONDS).
_AUTH_CACHE: dict[str, tuple[int, float]] = {}
AUTH_CACHE_SECONDS = 5.0


def _authenticated(cur: psycopg.Cursor[Any], token: str) -> int | None:
    """The agent's user id for a live key (from this process's 5 s cache, as the desk's), or None."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    cached = _AUTH_CACHE.get(digest)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    user_id = _looked_up(cur, token, digest)
    if user_id is not None:
        _AUTH_CACHE[digest] = (user_id, time.monotonic() + AUTH_CACHE_SECONDS)
    return user_id


def _looked_up(cur: psycopg.Cursor[Any], token: str, digest: str) -> int | None:
    cur.execute(AUTH_SQL, [token[:12]])
    row = cur.fetchone()
    if row is None or not row[2] or not hmac.compare_digest(row[0], digest):
        return None
    return int(row[1])


# The state's actions as the desk's reads join them (tickets.models.served_action_texts): their served texts,
# the agent's (`served`) or the model's (`served_model`), in order, with commas.
ACTIONS_TEXT = "(SELECT string_agg(a.{column}, ',' ORDER BY a.number) FROM tickets_stateaction a WHERE a.state_id = p.id)"
STATE_SQL = f"""
SELECT t.ticket_id, t.order_id, t.seller_type, p.version, p.data, {ACTIONS_TEXT.format(column="served")},
       p.action_figures, c.irreversible_tools, c.money_tools
FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id
JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s
"""
CONTEXT_SQL = f"""
SELECT t.id, t.ticket_id, t.order_id, t.seller_type, p.version, p.data, {ACTIONS_TEXT.format(column="served_model")},
       p.action_figures, c.irreversible_tools, c.money_tools, p.tokens, t.system_prompt, t.system_prompt_tokens,
       c.token_budget, c.compaction_threshold
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
    pk, *state, state_tokens, prompt, prompt_tokens, budget, threshold = row
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
        "pinned_state": _state(*state),  # the actions as the model reads them
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


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    match = ROUTE.match(environ.get("PATH_INFO", ""))
    if match is None:
        return _answer(start_response, "404 Not Found", {"error": "not_found"})
    ticket_id, resource, action_id = match.groups()
    method = environ["REQUEST_METHOD"]
    token = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Token ").strip()
    raw = b""
    body: dict[str, Any] = {}
    if method in ("POST", "PATCH"):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length)
        body = json.loads(raw or b"{}")
    conn = _conn()
    try:
        with conn.cursor() as cur:
            user_id = _authenticated(cur, token)
            if user_id is None:
                return _answer(start_response, "401 Unauthorized", {"error": "not_authenticated"})
            if method == "GET" and resource == "state" and action_id is None:
                cur.execute(STATE_SQL, [ticket_id])
                row = cur.fetchone()
                if row is None:
                    return _answer(start_response, "404 Not Found", {"error": "not_found"})
                return _answer(start_response, "200 OK", _state(*row), [("ETag", f'"{row[3]}"')])
            if method == "GET" and resource == "context" and action_id is None:
                context = _context(cur, ticket_id)
                if context is None:
                    return _answer(start_response, "404 Not Found", {"error": "not_found"})
                return _answer(start_response, "200 OK", context)
            if method == "POST" and resource == "turns" and action_id is None:
                return _answer(start_response, *raw_writes.turn(cur, ticket_id, user_id, body))
            if method == "POST" and resource == "actions" and action_id is None:
                key = environ.get("HTTP_IDEMPOTENCY_KEY", "")
                with conn.transaction():
                    answer = raw_writes.action(cur, ticket_id, user_id, key, raw, body)
                return _answer(start_response, *answer)
            if method == "PATCH" and resource == "actions" and action_id is not None:
                with conn.transaction():
                    answer = raw_writes.settle(cur, ticket_id, action_id, user_id, body)
                return _answer(start_response, *answer)
    except psycopg.OperationalError:
        conn.close()
        raise
    return _answer(start_response, "405 Method Not Allowed", {"error": "method_not_allowed"})
