"""Appending to the thread. The compaction policy is not run here: a turn arriving is one top-level
action (`desk.turns.receive_turn`) that opens the transaction, calls this, then compaction."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection, connections

from core.errors import InvalidInput
from core.tokens import count_turn
from core.vocabulary import THREAD_ROLES, TurnRole
from tickets.compiled_reads import CompiledRead
from tickets.errors import IdempotencyKeyReused, TicketNotFound
from tickets.fingerprints import request_fingerprint
from tickets.models import Ticket, Turn
from tickets.services.actors import SYSTEM, Actor
from tickets.services.idempotency import advisory_key, key_in_flight


@dataclass(frozen=True)
class TurnAppended:
    turn: Turn
    replayed: bool = False


# The class is read with the ticket, not locked: every ticket of a class would wait on its row. Compiled once
# per process (every turn takes this lock).
LOCKED_TICKET = CompiledRead(
    lambda pk: (
        Ticket.objects.select_for_update(of=("self",)).select_related("ticket_class").filter(pk=pk)[:2]
    ),
    int,
)


def append_turn(
    *,
    ticket: Ticket,
    role: str,
    content: str = "",
    tool: str = "",
    args: dict[str, Any] | None = None,
    tool_call_id: str = "",
    boundary: str = "",
    extra: dict[str, Any] | None = None,
    idempotency_key: str = "",
    by: Actor = SYSTEM,
    refuse_in_flight: bool = False,
) -> TurnAppended:
    """Store the next turn of the thread and add its tokens to the ticket's context size. Call inside a
    transaction (the caller's: `receive_turn`), which the ticket's row lock lasts for.

    With an idempotency key, a retry with the same body returns the turn first stored (`replayed`);
    the same key with another body is refused. The same key still in flight waits for it, or with
    `refuse_in_flight` (the API) is refused at once.
    """
    fields = _turn_fields(role, content, tool, args, tool_call_id, boundary)
    fingerprint = request_fingerprint(fields) if idempotency_key else ""
    using = ticket._state.db or "default"
    if connections[using].vendor == "postgresql" and (not idempotency_key or refuse_in_flight):
        # The key's lock, the earlier turn, the ticket's row lock and figures and the turn's row: one statement.
        appended = _append_in_one_statement(
            ticket, fields, extra=extra, idempotency_key=idempotency_key, fingerprint=fingerprint, by=by
        )
        assert appended is not None  # with no ceiling, a turn is always appended or replayed
        return appended
    if not idempotency_key:
        # No earlier turn to look for: the row is locked by the update that numbers the turn.
        return _append_counted(ticket, fields, extra=extra, idempotency_key="", fingerprint="", by=by)
    locked = LOCKED_TICKET.get(ticket.pk, using=using)
    earlier = _earlier_turn(locked, idempotency_key, fingerprint)
    if earlier is not None:
        return earlier
    tokens = _count(fields, locked.ticket_class.encoding)
    # The stored context size is kept current under this row lock, so a new turn adds exactly its own count.
    number, total = locked.turn_count + 1, locked.context_tokens + tokens
    turn = _insert_turn(
        locked,
        fields,
        number=number,
        total=total,
        tokens=tokens,
        extra=extra,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        by=by,
    )
    Ticket.objects.filter(pk=locked.pk).update(turn_count=number, context_tokens=total)
    ticket.turn_count = number
    ticket.context_tokens = total
    return TurnAppended(turn=turn)


def append_turn_up_to(
    *,
    ticket: Ticket,
    up_to_tokens: int,
    role: str,
    content: str = "",
    tool: str = "",
    args: dict[str, Any] | None = None,
    tool_call_id: str = "",
    boundary: str = "",
    extra: dict[str, Any] | None = None,
    idempotency_key: str = "",
    by: Actor = SYSTEM,
) -> TurnAppended | None:
    """`append_turn` as its own transaction: one statement, outside any transaction, that appends the turn only
    when the ticket's context size with it stays at or under `up_to_tokens` (the caller's: under it, nothing the
    turn causes needs the ticket's row lock beyond the statement's own). A key still in flight is refused at once.

    None when nothing was written and the caller is to append in a transaction of its own: the turn would pass
    the ceiling (the caller's ticket shows it: no statement is sent), the ticket row moved under a keyed
    statement's snapshot, or the database is not PostgreSQL."""
    if connections[ticket._state.db or "default"].vendor != "postgresql":
        return None  # before validating: the caller's append_turn does that
    fields = _turn_fields(role, content, tool, args, tool_call_id, boundary)
    return _append_in_one_statement(
        ticket,
        fields,
        extra=extra,
        idempotency_key=idempotency_key,
        fingerprint=request_fingerprint(fields) if idempotency_key else "",
        by=by,
        up_to_tokens=up_to_tokens,
    )


def _turn_fields(
    role: str, content: str, tool: str, args: dict[str, Any] | None, tool_call_id: str, boundary: str
) -> dict[str, Any]:
    """The turn's own fields (what its fingerprint is made of), refused when they make no turn."""
    if role not in THREAD_ROLES:
        raise InvalidInput(f"role {role!r} is not one of {', '.join(THREAD_ROLES)}", field="role")
    if role == TurnRole.TOOL_CALL and not tool:
        raise InvalidInput("a tool_call turn needs its tool name", field="tool")
    if role in (TurnRole.CUSTOMER, TurnRole.AGENT) and not content:
        raise InvalidInput(f"a {role} turn needs content", field="content")
    if args is not None and not isinstance(args, dict):
        raise InvalidInput("args must be a JSON object", field="args")
    return {
        "role": role,
        "content": content,
        "tool": tool,
        "args": args,
        "tool_call_id": tool_call_id,
        "boundary": boundary,
    }


def _count(fields: dict[str, Any], encoding: str) -> int:
    """The turn's tokens as the request will carry it (its boundary is not sent)."""
    return count_turn(
        **{name: value for name, value in fields.items() if name != "boundary"}, encoding=encoding
    )


def _earlier_turn(ticket: Ticket, idempotency_key: str, fingerprint: str) -> TurnAppended | None:
    """The turn first stored with this key (a retry: `replayed`), None when there is none; the key first used
    with another body is refused."""
    if not idempotency_key:
        return None
    first = Turn.objects.filter(ticket=ticket, idempotency_key=idempotency_key).first()
    if first is None:
        return None
    if first.request_fingerprint != fingerprint:
        raise _key_reused(idempotency_key, first.number)
    return TurnAppended(turn=first, replayed=True)


def _insert_turn(
    ticket: Ticket,
    fields: dict[str, Any],
    *,
    number: int,
    total: int,
    tokens: int,
    extra: dict[str, Any] | None,
    idempotency_key: str,
    fingerprint: str,
    by: Actor,
) -> Turn:
    """The turn's row, numbered, with the figures in force when it arrived (its class's budget and threshold)."""
    turn = _unsaved_turn(
        ticket, fields, tokens=tokens, extra=extra, key=idempotency_key, fingerprint=fingerprint, by=by
    )
    turn.number, turn.context_tokens = number, total
    turn.save(force_insert=True, using=ticket._state.db or "default")
    return turn


def _append_counted(
    ticket: Ticket,
    fields: dict[str, Any],
    *,
    extra: dict[str, Any] | None,
    idempotency_key: str,
    fingerprint: str,
    by: Actor,
) -> TurnAppended:
    """append_turn with no key elsewhere than PostgreSQL: the ticket row is locked, numbered and its context
    size moved by one UPDATE ... RETURNING (the lock's read and the figures' write in one statement), then the
    turn inserted. The class is the caller's (read with the ticket, never locked)."""
    tokens = _count(fields, ticket.ticket_class.encoding)
    table, quote = Ticket._meta.db_table, connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(table)} SET turn_count = turn_count + 1, context_tokens = context_tokens + %s "
            f"WHERE id = %s RETURNING turn_count, context_tokens",
            [tokens, ticket.pk],
        )
        row = cursor.fetchone()
    if row is None:
        raise TicketNotFound(f"no ticket {ticket.ticket_id}", ticket_id=ticket.ticket_id)
    number, total = row
    turn = _insert_turn(
        ticket,
        fields,
        number=number,
        total=total,
        tokens=tokens,
        extra=extra,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        by=by,
    )
    ticket.turn_count = number
    ticket.context_tokens = total
    return TurnAppended(turn=turn)


def _append_in_one_statement(
    ticket: Ticket,
    fields: dict[str, Any],
    *,
    extra: dict[str, Any] | None,
    idempotency_key: str,
    fingerprint: str,
    by: Actor,
    up_to_tokens: int | None = None,
) -> TurnAppended | None:
    """append_turn on PostgreSQL, in one statement: the ticket row locked, numbered and its context size moved
    by an UPDATE ... RETURNING whose row the turn's INSERT reads (`APPEND`). With a key (the API's, refused at
    once when in flight), the same statement first takes the key's advisory lock and looks for the turn first
    stored with it, and writes only when it holds the key and finds none (`KEYED_APPEND`).

    The earlier turn is read in the statement's snapshot, taken before the key's lock: a same-key request that
    committed in between numbered a turn on the ticket row, so the update, which sees the row at its newest,
    also asks that the turn count is still the snapshot's. When it is not (that, or any other turn committed
    meanwhile), nothing was written and the statement runs again, holding the key: its new snapshot shows
    every turn stored with the key.

    With `up_to_tokens` (`append_turn_up_to`: no transaction around, so the key's lock ends with the statement)
    the update also asks that the context size stays at or under it; nothing written is answered None, never
    run again."""
    using = ticket._state.db or "default"
    db = connections[using]
    tokens = _count(fields, ticket.ticket_class.encoding)
    bounded = up_to_tokens is not None
    if up_to_tokens is not None and ticket.context_tokens + tokens > up_to_tokens:
        return None  # as the caller read the ticket: over the ceiling, so not worth a statement
    turn = _unsaved_turn(
        ticket, fields, tokens=tokens, extra=extra, key=idempotency_key, fingerprint=fingerprint, by=by
    )
    values = [
        field.get_db_prep_save(field.pre_save(turn, True), connection=db) for field in _written_fields()
    ]
    moved = [tokens, ticket.pk, *([tokens, up_to_tokens] if bounded else []), *values]
    with db.cursor() as cursor:
        if not idempotency_key:
            cursor.execute(_append_sql(using, keyed=False, checked=False, bounded=bounded), moved)
            row = cursor.fetchone()
            if row is None and bounded:
                return None
        else:
            lock = advisory_key(ticket, idempotency_key)
            row, checked = None, True
            while row is None:
                sql = _append_sql(using, keyed=True, checked=checked, bounded=bounded)
                head = [lock, ticket.pk] if checked else [lock]
                cursor.execute(sql, [*head, ticket.pk, idempotency_key, *moved])
                held, *made_row = cursor.fetchone()
                made, prior = made_row[:3], made_row[3:]
                if not held:
                    raise key_in_flight(idempotency_key)
                if prior[0] is not None:
                    first = _turn_from_row(using, prior)
                    if first.request_fingerprint != fingerprint:
                        raise _key_reused(idempotency_key, first.number)
                    return TurnAppended(turn=first, replayed=True)
                if made[0] is not None:
                    row = tuple(made)
                elif bounded:
                    return None
                elif not checked:
                    break  # held, with a fresh snapshot, and still no row to update: the ticket is gone
                checked = False
    if row is None:
        raise TicketNotFound(f"no ticket {ticket.ticket_id}", ticket_id=ticket.ticket_id)
    turn.pk, turn.number, turn.context_tokens = row
    turn._state.adding, turn._state.db = False, using
    ticket.turn_count, ticket.context_tokens = turn.number, turn.context_tokens
    return TurnAppended(turn=turn)


def _key_reused(idempotency_key: str, number: int) -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        f"idempotency key {idempotency_key!r} was first used with a different turn (turn {number})",
        idempotency_key=idempotency_key,
    )


def _unsaved_turn(
    ticket: Ticket,
    fields: dict[str, Any],
    *,
    tokens: int,
    extra: dict[str, Any] | None,
    key: str,
    fingerprint: str,
    by: Actor,
) -> Turn:
    """The turn's row before it is numbered, with the figures in force when it arrived."""
    ticket_class = ticket.ticket_class
    return Turn(
        ticket=ticket,
        number=0,
        **fields,
        tokens=tokens,
        context_tokens=0,
        token_budget=ticket_class.token_budget,
        threshold_tokens=ticket_class.threshold_tokens,
        posted_by=by.user,
        idempotency_key=key,
        request_fingerprint=fingerprint,
        extra=extra or {},
    )


# The turn's row as `Turn.from_db` takes it (the earlier turn is read whole: a replay needs no other read).
_TURN_COLUMNS = [f.attname for f in Turn._meta.concrete_fields]


def _turn_from_row(using: str, values: list[Any]) -> Turn:
    """The turn read by a raw statement, its values converted as the ORM converts them (JSON text parsed)."""
    db = connections[using]
    converted = []
    for field, value in zip(Turn._meta.concrete_fields, values, strict=True):
        column = field.cached_col
        for convert in [*db.ops.get_db_converters(column), *field.get_db_converters(db)]:
            value = convert(value, column, db)
        converted.append(value)
    return Turn.from_db(using, _TURN_COLUMNS, converted)


# What the UPDATE ... RETURNING gives the turn's row (the rest are the statement's parameters).
_FROM_TICKET = {"number": "turn_count", "context_tokens": "context_tokens"}


@cache
def _written_fields() -> tuple[Any, ...]:
    """The turn's columns passed as parameters, in the INSERT's order."""
    meta = Turn._meta
    return tuple(
        f for f in meta.local_concrete_fields if f is not meta.auto_field and f.name not in _FROM_TICKET
    )


_LENGTH = re.compile(r"\(\d+\)$")


def _column_list(fields: Sequence[Any], quote: Callable[[str], str]) -> str:
    return ", ".join(quote(field.column) for field in fields)


@cache
def _append_sql(using: str, *, keyed: bool, checked: bool, bounded: bool) -> str:
    """APPEND (parameters: tokens, ticket pk, when `bounded` tokens and the ceiling, the written fields' values),
    or KEYED_APPEND (the key's advisory lock id, the ticket pk when `checked`, the ticket pk and the key, then as
    APPEND), PostgreSQL's SQL.

    The values are cast to their columns' types (a parameter in a SELECT list has none of its own), without a
    length: an explicit cast to varchar(n) would cut a long value where the column's assignment refuses it."""
    db = connections[using]
    q = db.ops.quote_name
    ticket, turn = q(Ticket._meta.db_table), q(Turn._meta.db_table)
    meta = Turn._meta
    columns = [f for f in meta.local_concrete_fields if f is not meta.auto_field]
    selected = [
        f"moved.{q(_FROM_TICKET[f.name])}"
        if f.name in _FROM_TICKET
        else f"%s::{_LENGTH.sub('', str(f.db_type(db)))}"
        for f in columns
    ]
    insert = (
        f"INSERT INTO {turn} ({_column_list(columns, q)}) "
        f"SELECT {', '.join(selected)} FROM moved RETURNING {q('id')}, {q('number')}, {q('context_tokens')}"
    )
    update = (
        f"UPDATE {ticket} SET {q('turn_count')} = {q('turn_count')} + 1, "
        f"{q('context_tokens')} = {q('context_tokens')} + %s WHERE {q('id')} = %s"
    )
    if bounded:
        update += f" AND {q('context_tokens')} + %s <= %s"
    moving = f"RETURNING {q('turn_count')}, {q('context_tokens')}"
    if not keyed:
        return f"WITH moved AS ({update} {moving}) {insert}"
    seen = f", seen AS (SELECT {q('turn_count')} FROM {ticket} WHERE {q('id')} = %s)" if checked else ""
    same_count = f" AND {q('turn_count')} = (SELECT {q('turn_count')} FROM seen)" if checked else ""
    return (
        f"WITH held AS (SELECT pg_try_advisory_xact_lock(%s) AS held){seen}, "
        f"prior AS (SELECT {_column_list(meta.concrete_fields, q)} FROM {turn} "
        f"WHERE {q('ticket_id')} = %s AND {q('idempotency_key')} = %s), "
        f"moved AS ({update} AND (SELECT held FROM held) AND NOT EXISTS (SELECT FROM prior){same_count} {moving}), "
        f"made AS ({insert}) "
        "SELECT held.held, made.*, prior.* FROM held LEFT JOIN prior ON true LEFT JOIN made ON true"
    )
