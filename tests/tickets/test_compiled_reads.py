"""A compiled read answers as its queryset would, for any values, on any thread's connection, in one query."""

from __future__ import annotations

import json
import threading

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from compaction.models import CompactionEvent
from compaction.selectors import (
    CONTEXT_ROW,
    CONTEXT_TICKET,
    TURNS_FROM,
    context_rows,
    context_tickets,
)
from tests.factories import chat
from tickets.compiled_reads import CompiledRead
from tickets.models import Ticket, TicketClass, Turn
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def tickets(standard_class: TicketClass) -> list[Ticket]:
    made = []
    for i, turns in enumerate((3, 0, 7)):
        t = open_ticket(
            ticket_id=f"T-CR-{i}", order_id=f"SU-{i}", seller_type="retail", ticket_class=standard_class
        )
        chat(t, turns)
        made.append(t)
    return made


def test_context_ticket_matches_the_orm_for_every_ticket(tickets: list[Ticket]) -> None:
    for ticket in tickets:
        compiled = CONTEXT_TICKET.get(ticket.ticket_id)
        orm = context_tickets().get(ticket_id=ticket.ticket_id)
        assert compiled.pk == orm.pk and compiled.ticket_id == ticket.ticket_id
        assert compiled.turn_count == orm.turn_count
        assert compiled.ticket_class.slug == orm.ticket_class.slug
        assert compiled.pinned_state.version == orm.pinned_state.version
        assert compiled.pinned_state.data == orm.pinned_state.data
        assert compiled.active_event == orm.active_event  # type: ignore[attr-defined]
        assert compiled.pending_event == orm.pending_event  # type: ignore[attr-defined]


def test_context_ticket_is_one_query_with_its_relations_loaded(tickets: list[Ticket]) -> None:
    CONTEXT_TICKET.get(tickets[0].ticket_id)  # compiled
    with CaptureQueriesContext(connection) as queries:
        ticket = CONTEXT_TICKET.get(tickets[2].ticket_id)
        assert ticket.ticket_class.token_budget > 0
        assert ticket.pinned_state.tokens >= 0
    assert len(queries) == 1
    # Bound on the server (prepared) on PostgreSQL: logged with placeholders, the value apart.
    assert tickets[2].ticket_id in queries[0]["sql"] or "$" in queries[0]["sql"]


def test_an_unknown_ticket_is_does_not_exist(tickets: list[Ticket]) -> None:
    with pytest.raises(Ticket.DoesNotExist):
        CONTEXT_TICKET.get("T-NOPE")
    # A value shaped like the placeholder is just another id.
    with pytest.raises(Ticket.DoesNotExist):
        CONTEXT_TICKET.get("\uffff\ufffecompiled-read-0\ufffe\uffff")


def test_values_list_rows_follow_both_values(tickets: list[Ticket]) -> None:
    ticket = tickets[2]
    for first in (1, 4, 7, 8):
        expected = list(
            Turn.objects.filter(ticket=ticket, number__gte=first)
            .order_by("number")
            .values_list("number", "role", "content", "tool", "args", "tool_call_id", "boundary", "tokens")
        )
        assert TURNS_FROM.all(ticket.pk, first) == expected
    assert [row[0] for row in TURNS_FROM.all(ticket.pk, 5)] == [5, 6, 7]
    assert TURNS_FROM.all(tickets[1].pk, 1) == []


def test_values_of_the_wrong_kind_or_count_are_refused(tickets: list[Ticket]) -> None:
    with pytest.raises(TypeError):
        TURNS_FROM.all("1", 1)
    with pytest.raises(TypeError):
        TURNS_FROM.all(tickets[0].pk)


def test_a_placeholder_the_lookup_changes_fails_at_compile(tickets: list[Ticket]) -> None:
    """icontains wraps the value in %...%: the compiled SQL could not take the real value in its place."""
    read = CompiledRead(lambda text: Ticket.objects.filter(ticket_id__icontains=text), str)
    with pytest.raises(ImproperlyConfigured):
        read.all("CR")


@pytest.mark.postgres
def test_each_thread_uses_its_own_connection(tickets: list[Ticket]) -> None:
    CONTEXT_TICKET.get(tickets[0].ticket_id)  # compiled on this thread
    seen: list[object] = []

    def other_thread() -> None:
        try:
            with pytest.raises(Ticket.DoesNotExist):
                # The other connection does not see this test's uncommitted tickets: proof it is its own.
                CONTEXT_TICKET.get(tickets[0].ticket_id)
            seen.append(connections["default"])
        except BaseException as exc:
            seen.append(exc)
        finally:
            connections.close_all()

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert len(seen) == 1 and not isinstance(seen[0], BaseException), seen
    assert seen[0] is not connections["default"]


def test_rows_are_the_querysets_values_as_the_database_gives_them(tickets: list[Ticket]) -> None:
    for ticket in [*tickets, tickets[0]]:
        orm = list(context_rows(ticket.ticket_id))
        with CaptureQueriesContext(connection) as queries:
            rows = CONTEXT_ROW.rows(ticket.ticket_id, 0, 0)
        assert len(rows) == 1 and len(queries) == 1
        # The same values; the JSON of the two events as the database's text (no converter ran).
        assert rows[0][:-2] == orm[0][:-2]
        assert [None if v is None else json.loads(v) for v in rows[0][-2:]] == list(orm[0][-2:])
        if connection.vendor == "postgresql":
            # The query's constants are in its SQL: the ticket id and the state and version whose actions' texts
            # are held are its parameters (bound on the server, as the hottest reads are: logged as $1..$3).
            sql = queries[0]["sql"]
            assert "$3" in sql and "$4" not in sql and "'summary'" in sql
    assert CONTEXT_ROW.rows("T-NOPE", 0, 0) == []
    assert CONTEXT_ROW.rows("it's %s \u2011 '; DROP TABLE x; --", 0, 0) == []
    assert len(TURNS_FROM.rows(tickets[2].pk, 3)) == 5


@pytest.mark.postgres
def test_the_context_read_probes_the_newest_applied_event_however_many_there_are(
    tickets: list[Ticket],
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's plan")
    ticket = tickets[2]
    CompactionEvent.objects.bulk_create(
        CompactionEvent(
            ticket=ticket,
            number=n,
            at_turn=n,
            status="applied",
            first_replaced_turn=1,
            last_replaced_turn=1,
            tokens_before=10,
            tokens_after=5,
            threshold_tokens=8,
            token_budget=10,
            summary={"narrative": "x" * 200},
        )
        for n in range(1, 401)
    )
    query = CONTEXT_ROW._build(ticket.ticket_id, 0, 0)
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "event_active" in plan and "Sort" not in plan, plan
    assert CONTEXT_ROW.rows(ticket.ticket_id, 0, 0)[0][-2] is not None
