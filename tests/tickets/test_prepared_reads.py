"""The agent's hottest reads are prepared on PostgreSQL: the database plans them once per connection."""

from __future__ import annotations

import pytest
from django.db import DEFAULT_DB_ALIAS, connection
from django.test.utils import CaptureQueriesContext

from desk.api.selectors import SERVED_STATE_BY_TICKET_ID, served_state
from tickets.models import Ticket
from tickets.served_state import ACTION_TEXTS, ActionTextCache
from tickets.services.actions import record_action

pytestmark = pytest.mark.django_db


def prepared_statements() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return int(cursor.fetchone()[0])


@pytest.mark.postgres
def test_a_compiled_read_run_often_is_prepared_and_answers_the_same(ticket: Ticket, settings) -> None:
    settings.DATABASE_PREPARED_STATEMENTS = True
    first = SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id, 0, 0)
    before = prepared_statements()
    with CaptureQueriesContext(connection) as queries:
        for _ in range(8):
            assert SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id, 0, 0) == first
    assert len(queries) == 8  # logged and counted as Django's own
    assert prepared_statements() == before + 1
    assert SERVED_STATE_BY_TICKET_ID.rows("T-NOPE", 0, 0) == []


@pytest.mark.postgres
def test_prepared_reads_can_be_turned_off_for_a_pooler(ticket: Ticket, settings) -> None:
    settings.DATABASE_PREPARED_STATEMENTS = False
    before = prepared_statements()
    with CaptureQueriesContext(connection) as queries:
        SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id, 0, 0)
    assert ticket.ticket_id in queries[0]["sql"]  # bound on the client, as Django binds
    for _ in range(8):
        SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id, 0, 0)
    assert prepared_statements() == before


def test_the_actions_texts_are_joined_again_only_for_a_new_version(ticket: Ticket) -> None:
    """The state GET joins a state's actions once per version in a process: a read of the version held gets NULL
    from the database and serves the copy; a write's new version is joined afresh; another state's copy (a
    ticket id given again) is never taken."""
    record_action(ticket=ticket, tool="issue_refund", item="lamp", amount_cents=100, idempotency_key="a")
    key = (DEFAULT_DB_ALIAS, ticket.ticket_id, False)
    first = served_state(ticket.ticket_id)
    assert first is not None and first.text is not None and '"item":"lamp"' in first.text
    state, version = ACTION_TEXTS.held(key)
    assert version == first.version and state > 0
    assert SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id, state, version)[0][3] is None  # not joined
    assert (
        SERVED_STATE_BY_TICKET_ID.rows(ticket.ticket_id, state, version - 1)[0][3]
        == first.text.split('"actions_taken":[')[1].split("]")[0]
    )
    with CaptureQueriesContext(connection) as queries:
        assert served_state(ticket.ticket_id) == first
    assert len(queries) == 1
    record_action(ticket=ticket, tool="issue_refund", item="mug", amount_cents=100, idempotency_key="b")
    later = served_state(ticket.ticket_id)
    assert later is not None and later.version == first.version + 1 and '"item":"mug"' in (later.text or "")
    ACTION_TEXTS.clear()
    ACTION_TEXTS.resolve(key, state + 1000, later.version, '{"id":"A1","tool":"forged"}')
    assert "forged" not in (served_state(ticket.ticket_id).text or "")


def test_the_held_texts_are_bounded_by_their_characters() -> None:
    cache = ActionTextCache(max_chars=10)
    assert cache.resolve(("d", "T-1", False), 1, 1, "abcdef") == "abcdef"
    cache.resolve(("d", "T-2", False), 2, 1, "ghij")
    cache.resolve(("d", "T-3", False), 3, 1, "kl")  # 12 > 10: the least recently used goes
    assert cache.held(("d", "T-1", False)) == (0, 0) and cache.held(("d", "T-3", False)) == (3, 1)
    cache.resolve(("d", "T-4", False), 4, 1, "x" * 11)  # never kept: larger than the whole
    assert cache.held(("d", "T-4", False)) == (0, 0)
    assert cache.resolve(("d", "T-1", False), 1, 1, None) is None  # went: the reader takes its slower way
