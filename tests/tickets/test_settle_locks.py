"""settle_action locks the state row, once, and nothing else: settles of two tickets of one class do not wait
on each other, and the class row stays free (PostgreSQL, two sessions)."""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from tests.factories import chat
from tickets.models import Ticket, TicketClass
from tickets.services.actions import record_action, settle_action
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_intents(transactional_db: None) -> tuple[Ticket, Ticket]:
    klass = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    tickets = []
    for n in (1, 2):
        ticket = open_ticket(ticket_id=f"T-{n}", order_id=f"SU-{n}", seller_type="x", ticket_class=klass)
        chat(ticket, 2)
        record_action(ticket=ticket, tool="issue_refund", item="lamp", amount_cents=100,
                      idempotency_key="k", status="intended")  # fmt: skip
        tickets.append(ticket)
    return tickets[0], tickets[1]


def test_settle_takes_one_lock_and_only_on_the_state_row(two_intents: tuple[Ticket, Ticket]) -> None:
    first, _ = two_intents
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        settle_action(ticket=first, action_id="A1", status="succeeded")
    locks = [q["sql"] for q in queries.captured_queries if "FOR UPDATE" in q["sql"]]
    assert len(locks) == 1
    assert locks[0].rstrip().endswith('FOR UPDATE OF "tickets_pinnedstate"')


def test_settles_of_two_tickets_of_one_class_do_not_wait_on_each_other(
    two_intents: tuple[Ticket, Ticket],
) -> None:
    first, second = two_intents
    settled, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_a_settle_open() -> None:
        try:
            with transaction.atomic():
                settle_action(ticket=first, action_id="A1", status="succeeded")
                settled.set()
                release.wait(timeout=30)
        except BaseException as exc:  # seen by the test
            errors.append(exc)
            settled.set()
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_a_settle_open)
    holder.start()
    try:
        assert settled.wait(timeout=30) and not errors
        with transaction.atomic(), connection.cursor() as cursor:
            # A wait would fail here instead of hanging: NOWAIT for the class row, lock_timeout for the settle.
            cursor.execute(
                "SELECT id FROM tickets_ticketclass WHERE id = %s FOR UPDATE NOWAIT", [first.ticket_class_id]
            )
            cursor.execute("SET LOCAL lock_timeout = '5s'")
            answer = settle_action(ticket=second, action_id="A1", status="succeeded")
        assert answer.changed
    except OperationalError as exc:  # pragma: no cover - the failure this test exists to catch
        pytest.fail(f"the second session waited on a lock the first settle took: {exc}")
    finally:
        release.set()
        holder.join(timeout=30)
    assert not errors
