"""An action takes its key's advisory lock in the statement that locks its rows (PostgreSQL): a duplicate whose
first request commits while the duplicate's statement waits for the key (after that statement's snapshot was
taken) still gets the first answer, never a second action; one refused at once locks nothing. Two sessions."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models import Subquery
from django.test.utils import CaptureQueriesContext

from tests.factories import chat
from tickets.models import IdempotencyRecord, PinnedState, StateChange, Ticket, TicketClass
from tickets.services.actions import ActionRecorded, record_action
from tickets.services.idempotency import advisory_key, advisory_key_sql
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REFUND: dict[str, Any] = {"tool": "issue_refund", "item": "lamp", "amount_cents": 900}


@pytest.fixture
def ticket(transactional_db: None) -> Ticket:
    klass = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    ticket = open_ticket(ticket_id="T-\u2011K", order_id="SU-1", seller_type="x", ticket_class=klass)
    chat(ticket, 2)
    return ticket


def waiting_on_an_advisory_lock() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return int(cursor.fetchone()[0])


def test_a_duplicate_that_waited_for_the_key_gets_the_first_answer(ticket: Ticket) -> None:
    recorded, release = threading.Event(), threading.Event()
    first: list[ActionRecorded] = []
    second: list[ActionRecorded | BaseException] = []

    def first_request() -> None:
        try:
            with transaction.atomic():
                first.append(record_action(ticket=ticket, idempotency_key="k-1", **REFUND))
                recorded.set()
                release.wait(timeout=30)
        finally:
            recorded.set()
            connections.close_all()

    def duplicate() -> None:
        try:
            second.append(record_action(ticket=ticket, idempotency_key="k-1", **REFUND))
        except BaseException as exc:  # seen by the test
            second.append(exc)
        finally:
            connections.close_all()

    holder = threading.Thread(target=first_request)
    holder.start()
    assert recorded.wait(timeout=10) and first
    waiter = threading.Thread(target=duplicate)
    waiter.start()
    try:
        # The duplicate's statement has its snapshot and waits for the key the first request holds.
        for _ in range(2000):
            if waiting_on_an_advisory_lock():
                break
            threading.Event().wait(0.01)
        assert waiting_on_an_advisory_lock() == 1
    finally:
        release.set()
        holder.join(timeout=30)
        waiter.join(timeout=30)
    [answer] = second
    assert isinstance(answer, ActionRecorded), answer
    assert answer.replayed and answer.body == first[0].body
    assert len(PinnedState.objects.get(ticket=ticket).items.actions_taken) == 1
    assert IdempotencyRecord.objects.filter(ticket=ticket).count() == 1
    assert StateChange.objects.filter(ticket=ticket, op="action_taken").count() == 1


def test_the_key_is_taken_in_the_statement_that_locks_the_rows(ticket: Ticket) -> None:
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        record_action(ticket=ticket, idempotency_key="k-2", refuse_in_flight=True, **REFUND)
    advisory = [q["sql"] for q in queries.captured_queries if "advisory" in q["sql"]]
    assert len(advisory) == 1
    assert "pg_try_advisory_xact_lock" in advisory[0] and "FOR UPDATE" in advisory[0]


@pytest.mark.parametrize("key", ["rf-1", "k\u00e9y-\u2603", "x" * 255])
def test_the_database_names_the_keys_lock_as_advisory_key_does(ticket: Ticket, key: str) -> None:
    """The action's statement names the key's lock from the ticket's primary key before it has read the
    ticket: the same name as advisory_key's, so a request holding the lock by that name holds off a duplicate;
    no name at all (no lock taken) for a ticket that does not exist."""

    def named(ticket_id: str) -> int | None:
        pk = Subquery(Ticket.objects.filter(ticket_id=ticket_id).values("pk")[:1])
        rows = Ticket.objects.annotate(name=advisory_key_sql(pk, key)).filter(pk=ticket.pk)
        return rows.values_list("name", flat=True).get()

    assert named(ticket.ticket_id) == advisory_key(ticket, key)
    assert named("T-NOPE") is None
