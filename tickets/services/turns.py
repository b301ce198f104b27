"""Appending to the thread. The compaction policy is not run here: a turn arriving is one top-level
action (`desk.turns.receive_turn`) that opens the transaction, calls this, then compaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from core.errors import InvalidInput
from core.tokens import count_turn
from core.vocabulary import THREAD_ROLES, TurnRole
from tickets.compiled_reads import CompiledRead
from tickets.errors import IdempotencyKeyReused, TicketNotFound
from tickets.fingerprints import request_fingerprint
from tickets.models import Ticket, Turn
from tickets.services.actors import SYSTEM, Actor
from tickets.services.idempotency import hold_key


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
    if role not in THREAD_ROLES:
        raise InvalidInput(f"role {role!r} is not one of {', '.join(THREAD_ROLES)}", field="role")
    if role == TurnRole.TOOL_CALL and not tool:
        raise InvalidInput("a tool_call turn needs its tool name", field="tool")
    if role in (TurnRole.CUSTOMER, TurnRole.AGENT) and not content:
        raise InvalidInput(f"a {role} turn needs content", field="content")
    if args is not None and not isinstance(args, dict):
        raise InvalidInput("args must be a JSON object", field="args")

    if idempotency_key and refuse_in_flight:
        hold_key(ticket, idempotency_key, wait=False)
    fields: dict[str, Any] = {
        "role": role,
        "content": content,
        "tool": tool,
        "args": args,
        "tool_call_id": tool_call_id,
        "boundary": boundary,
    }
    fingerprint = request_fingerprint(fields) if idempotency_key else ""
    if not idempotency_key or (refuse_in_flight and connection.vendor == "postgresql"):
        # No earlier turn to look for under the row lock (no key), or none can commit meanwhile (the key's
        # advisory lock is held): the row is locked by the update that numbers the turn, in one statement.
        return _earlier_turn(ticket, idempotency_key, fingerprint) or _append_counted(
            ticket, fields, extra=extra, idempotency_key=idempotency_key, fingerprint=fingerprint, by=by
        )
    locked = LOCKED_TICKET.get(ticket.pk, using=ticket._state.db or "default")
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
        raise IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} was first used with a different turn (turn {first.number})",
            idempotency_key=idempotency_key,
        )
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
    """The turn's row, with the figures in force when it arrived (its class's budget and threshold)."""
    ticket_class = ticket.ticket_class
    return Turn.objects.create(
        ticket=ticket,
        number=number,
        **fields,
        tokens=tokens,
        context_tokens=total,
        token_budget=ticket_class.token_budget,
        threshold_tokens=ticket_class.threshold_tokens,
        posted_by=by.user,
        idempotency_key=idempotency_key,
        request_fingerprint=fingerprint,
        extra=extra or {},
    )


def _append_counted(
    ticket: Ticket,
    fields: dict[str, Any],
    *,
    extra: dict[str, Any] | None,
    idempotency_key: str,
    fingerprint: str,
    by: Actor,
) -> TurnAppended:
    """append_turn when no earlier turn with the key can appear meanwhile: the ticket row is locked, numbered
    and its context size moved by one UPDATE ... RETURNING (the lock's read and the figures' write in one
    statement), then the turn inserted. The class is the caller's (read with the ticket, never locked)."""
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
