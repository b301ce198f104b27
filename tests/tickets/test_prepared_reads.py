"""The agent's hottest reads are prepared on PostgreSQL: the database plans them once per connection."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from desk.api.selectors import SERVED_STATE_BY_TICKET_ID
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def prepared_statements() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return int(cursor.fetchone()[0])


def test_a_compiled_read_run_often_is_prepared_and_answers_the_same(ticket: Ticket, settings) -> None:
    settings.DATABASE_PREPARED_READS = True
    first = SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id)
    before = prepared_statements()
    with CaptureQueriesContext(connection) as queries:
        for _ in range(8):
            assert SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id) == first
    assert len(queries) == 8  # logged and counted as Django's own
    assert prepared_statements() == before + 1
    assert SERVED_STATE_BY_TICKET_ID.rows("T-NOPE") == []


def test_prepared_reads_can_be_turned_off_for_a_pooler(ticket: Ticket, settings) -> None:
    settings.DATABASE_PREPARED_READS = False
    before = prepared_statements()
    with CaptureQueriesContext(connection) as queries:
        SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id)
    assert ticket.ticket_id in queries[0]["sql"]  # bound on the client, as Django binds
    for _ in range(8):
        SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id)
    assert prepared_statements() == before
