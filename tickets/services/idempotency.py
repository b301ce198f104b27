"""A request whose Idempotency-Key is still being processed is told so at once (the IETF draft's 409),
instead of queueing behind the first and getting its replay later.

On PostgreSQL the first request holds a transaction advisory lock named by (ticket, key) until it commits;
a request that cannot take it is refused. SQLite has no such lock: there the database's single writer
serializes duplicates and the later one gets the replay.

Requests whose first answer is kept here (state writes; actions keep theirs in the same table, with the guard's
own reads) look it up with `stored_answer` and record it with `store_answer`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, Func, TextField, Value
from django.db.models.functions import Cast

from tickets.errors import IdempotencyKeyInFlight, IdempotencyKeyReused
from tickets.models import IdempotencyRecord, Ticket


def advisory_key(ticket: Ticket, idempotency_key: str) -> int:
    """The name of the (ticket, key) advisory lock: the first 8 bytes of a SHA-256, as a signed bigint."""
    digest = hashlib.sha256(f"sundry-idempotency:{ticket.pk}:{idempotency_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def advisory_key_sql(ticket_pk: Any, idempotency_key: str) -> Func:
    """`advisory_key` computed by PostgreSQL from an expression giving the ticket's primary key (a subquery
    on the ticket's id), so a statement that has not read the ticket yet can take the key's lock; the same
    value (bytes 1-8 of the SHA-256 as a signed bigint), NULL when the expression is (no such ticket)."""
    return Func(
        Cast(ticket_pk, TextField()),
        Value(idempotency_key),
        template=(
            "(('x' || left(encode(sha256(convert_to('sundry-idempotency:' || %(expressions)s, 'UTF8')), "
            "'hex'), 16))::bit(64)::bigint)"
        ),
        arg_joiner=" || ':' || ",
        output_field=BigIntegerField(),
    )


def hold_key(ticket: Ticket, idempotency_key: str, *, wait: bool) -> None:
    """Take the key's advisory lock for this transaction: wait for a request still holding it (`wait`), or
    raise IdempotencyKeyInFlight. Either way, once it is held, no other request with the key is between its
    reads and its commit, so a read made after it sees the key's first answer if there is one."""
    if connection.vendor != "postgresql":
        return
    key = advisory_key(ticket, idempotency_key)
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            return
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
        (acquired,) = cursor.fetchone()
    if not acquired:
        raise key_in_flight(idempotency_key)


def key_in_flight(idempotency_key: str) -> IdempotencyKeyInFlight:
    """The refusal of a request whose key another request holds."""
    return IdempotencyKeyInFlight(
        f"a request with idempotency key {idempotency_key!r} is still being processed; "
        "retry it in a moment to get its result",
        idempotency_key=idempotency_key,
    )


def hold_order(order_id: str) -> None:
    """Take the order's advisory lock for this transaction (PostgreSQL), waiting for another: one money
    action at a time per order, so a cap over the order's tickets reads figures nobody is about to change."""
    if connection.vendor != "postgresql":
        return
    digest = hashlib.sha256(f"sundry-order:{order_id}".encode()).digest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest[:8], "big", signed=True)])


@dataclass(frozen=True)
class StoredAnswer:
    """The first answer to a request made with an idempotency key: what a retry with the key gets again."""

    status: int
    body: dict[str, Any]


def scoped_key(kind: str, scope: str, idempotency_key: str) -> str:
    """The stored key of a request whose keys are scoped by more than the ticket (state writes: per ticket and
    token), in the ticket's IdempotencyRecord space: the kind and the scope, then the key's digest (so it
    fits the column whatever the key's length, and no bare action key can take its place by accident)."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
    return f"{kind}:{scope}:{digest}"


def stored_answer(
    ticket: Ticket, stored_key: str, fingerprint: str, *, shown_key: str
) -> StoredAnswer | None:
    """The first answer recorded under the key, None when there is none yet; IdempotencyKeyReused when it was
    first used with another body. Call with the key held (`hold_key`)."""
    record = (
        IdempotencyRecord.objects.filter(ticket=ticket, key=stored_key)
        .only("fingerprint", "response_status", "response_body")
        .first()
    )
    if record is None:
        return None
    if record.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"idempotency key {shown_key!r} was first used with a different request body",
            idempotency_key=shown_key,
        )
    return StoredAnswer(status=record.response_status, body=record.response_body)


def answer_record(
    ticket: Ticket, stored_key: str, fingerprint: str, answer: StoredAnswer
) -> IdempotencyRecord:
    """The row that keeps the answer, unsaved (a state write saves it with its own writes: WriteBatch)."""
    return IdempotencyRecord(
        ticket=ticket,
        key=stored_key,
        fingerprint=fingerprint,
        response_status=answer.status,
        response_body=answer.body,
    )


def store_answer(ticket: Ticket, stored_key: str, fingerprint: str, answer: StoredAnswer) -> None:
    answer_record(ticket, stored_key, fingerprint, answer).save(force_insert=True)
