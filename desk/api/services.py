"""The API's writes: thin wrappers that give each view exactly one service to call.

The domain rules live in tickets.services; what is added here is only what HTTP needs.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import connection, transaction

from desk.turns import TurnReceived, receive_turn
from tickets.errors import IdempotencyKeyInFlight, RepeatRefused
from tickets.models import Ticket
from tickets.services.actions import ActionRecorded, record_action
from tickets.services.actors import Actor


def _advisory_key(ticket: Ticket, idempotency_key: str) -> int:
    digest = hashlib.sha256(f"sundry-idempotency:{ticket.pk}:{idempotency_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _refuse_if_in_flight(ticket: Ticket, idempotency_key: str) -> None:
    """On PostgreSQL, take a transaction advisory lock named by (ticket, key), or answer "still in flight"."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_advisory_key(ticket, idempotency_key)])
        (acquired,) = cursor.fetchone()
    if not acquired:
        raise IdempotencyKeyInFlight(
            f"a request with idempotency key {idempotency_key!r} is still being processed; "
            "retry it in a moment to get its result",
            idempotency_key=idempotency_key,
        )


def receive_turn_once(*, ticket: Ticket, idempotency_key: str, by: Actor, **fields: Any) -> TurnReceived:
    """`receive_turn`, with a retried turn (same Idempotency-Key) stored once and in-flight duplicates told.

    The advisory lock is held only while the turn is appended (a short transaction); a compaction that
    runs after it holds nothing.
    """
    if idempotency_key:
        with transaction.atomic():
            _refuse_if_in_flight(ticket, idempotency_key)
            return receive_turn(ticket=ticket, idempotency_key=idempotency_key, by=by, **fields)
    return receive_turn(ticket=ticket, by=by, **fields)


def record_action_once(*, ticket: Ticket, idempotency_key: str, by: Actor, **fields: Any) -> ActionRecorded:
    """`record_action`, with "a request with this key is still in flight" made visible.

    `record_action` locks the ticket row for its whole transaction, so a concurrent duplicate would
    simply queue behind the first request and then get its replay. The Idempotency-Key draft wants
    the duplicate told at once instead (409), so on PostgreSQL the first request holds a transaction
    advisory lock named by (ticket, key) until it commits; a request that cannot take it is answered
    409 and its retry, once the first has committed, gets the replay. SQLite has no such lock: there
    the database's single writer serializes duplicates and the later one gets the replay.

    A refused repeat leaves one trace, its RefusedAttempt: `record_action` rolls the action back and writes
    the refusal in this transaction, which therefore commits before the refusal is raised to the view.
    """
    refused: RepeatRefused | None = None
    with transaction.atomic():
        _refuse_if_in_flight(ticket, idempotency_key)
        try:
            return record_action(ticket=ticket, idempotency_key=idempotency_key, by=by, **fields)
        except RepeatRefused as exc:
            refused = exc
    raise refused
