"""A write batch stores what save() would, however often a model's INSERT is reused from its first compile."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from core.vocabulary import ActorKind, StateOp
from tickets import write_batch
from tickets.models import StateChange, Ticket, TicketClass
from tickets.services.lifecycle import open_ticket
from tickets.write_batch import WriteBatch

pytestmark = pytest.mark.django_db


def audit(ticket: Ticket, n: int, change: dict[str, object]) -> StateChange:
    return StateChange(ticket=ticket, op=StateOp.DECISION_MADE, actor_kind=ActorKind.AGENT, from_version=n + 1,
                       to_version=n + 2, change=change, after_tokens=10 * n, thread_turn=0,
                       subject_id=f"D{n}", reason="na\u00efve \u2011 'quoted' %s")  # fmt: skip


def test_every_batched_insert_is_the_row_save_would_store(standard_class: TicketClass) -> None:
    ticket = open_ticket(ticket_id="T-WB", order_id="SU-1", seller_type="retail", ticket_class=standard_class)
    before = ticket.context_tokens
    changes = [{"items": [{"n": n, "text": "\u2028 % %% {}"}]} for n in range(3)]
    for n, change in enumerate(changes):
        batch = WriteBatch()
        batch.insert(audit(ticket, n, change))
        batch.update(Ticket.objects.filter(pk=ticket.pk), context_tokens=F("context_tokens") + 1)
        with CaptureQueriesContext(connection) as queries:
            batch.run()
        assert len(queries) == (1 if connection.vendor == "postgresql" else 2)
    rows = list(StateChange.objects.filter(ticket=ticket, op=StateOp.DECISION_MADE).order_by("from_version"))
    assert [r.change for r in rows] == changes
    assert [r.subject_id for r in rows] == ["D0", "D1", "D2"]
    assert all(r.reason == "na\u00efve \u2011 'quoted' %s" and r.created_at is not None for r in rows)
    assert rows[0].created_at <= rows[1].created_at <= rows[2].created_at
    ticket.refresh_from_db()
    assert ticket.context_tokens == before + 3


def test_an_update_reused_by_its_shape_writes_each_call_s_own_values(standard_class: TicketClass) -> None:
    one = open_ticket(ticket_id="T-WB1", order_id="SU-1", seller_type="retail", ticket_class=standard_class)
    two = open_ticket(ticket_id="T-WB2", order_id="SU-2", seller_type="retail", ticket_class=standard_class)
    write_batch._UPDATE_SQL.clear()
    shapes = []
    for ticket, delta, stale in ((one, 5, None), (two, 7, None), (one, -2, None)):
        batch = WriteBatch()
        batch.update_row(
            Ticket,
            ticket.pk,
            context_tokens=F("context_tokens") + delta,
            intent_stale_at=stale,
            turn_count=delta % 5,
        )
        batch.run()
        shapes.append(len(write_batch._UPDATE_SQL))
    one_after, two_after = Ticket.objects.get(pk=one.pk), Ticket.objects.get(pk=two.pk)
    assert one_after.context_tokens == one.context_tokens + 3 and one_after.turn_count == 3
    assert two_after.context_tokens == two.context_tokens + 7 and two_after.turn_count == 2
    if connection.vendor == "postgresql":
        # One statement text for the shape (compiled once, the values its parameters); another shape its own.
        assert shapes == [1, 1, 1]
        batch = WriteBatch()
        batch.update_row(Ticket, two.pk, context_tokens=F("context_tokens") + 1, status="waiting")
        batch.run()
        assert Ticket.objects.get(pk=two.pk).status == "waiting" and len(write_batch._UPDATE_SQL) == 2
