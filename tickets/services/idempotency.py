"""A request whose Idempotency-Key is still being processed is told so at once (the IETF draft's 409),
instead of queueing behind the first and getting its replay later.

On PostgreSQL the first request holds a transaction advisory lock named by (ticket, key) until it commits;
a request that cannot take it is refused. SQLite has no such lock: there the database's single writer
serializes duplicates and the later one gets the replay.
"""

from __future__ import annotations

import hashlib

from django.db import connection

from tickets.errors import IdempotencyKeyInFlight
from tickets.models import Ticket


def advisory_key(ticket: Ticket, idempotency_key: str) -> int:
    digest = hashlib.sha256(f"sundry-idempotency:{ticket.pk}:{idempotency_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


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
        raise IdempotencyKeyInFlight(
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
