"""The queue flags refused repeats and intents left open past their class's timeout, and filters on
them; the metrics page counts the refused repeats in its date range."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from desk.pages.queue import QueueFlag
from tests.desk.pages.test_queue import QUEUE_QUERIES, make_tickets
from tickets.errors import RepeatRefused
from tickets.models import RefusedAttempt, Ticket, TicketClass
from tickets.services.actions import record_action

pytestmark = pytest.mark.django_db


def refuse_a_repeat(ticket: Ticket) -> None:
    """The agent sends the same refund again under a new key, spelled differently: the desk refuses it."""
    with pytest.raises(RepeatRefused):
        record_action(
            ticket=ticket, tool="Issue_Refund", item="Kettle ", amount_cents=1500, idempotency_key="again"
        )


def leave_an_intent_open(ticket: Ticket, *, overdue: bool) -> None:
    record_action(
        ticket=ticket,
        tool="issue_refund",
        item="lamp",
        amount_cents=900,
        idempotency_key="lamp-1",
        status="intended",
    )
    ticket.refresh_from_db()
    assert ticket.intent_stale_at is not None
    if overdue:
        # The clock moves on past the class's timeout (the deadline the services stored, moved back).
        Ticket.objects.filter(pk=ticket.pk).update(intent_stale_at=timezone.now() - timedelta(minutes=1))


def rows(html: str) -> list[str]:
    return [chunk.split('"')[0] for chunk in html.split('data-row-link="')[1:]]


def test_the_queue_flags_and_filters_refused_repeats_and_stale_intents(
    sam: Client, standard_class: TicketClass, django_assert_num_queries: Any
) -> None:
    refused, stale, fresh, plain = make_tickets(standard_class, 4)
    refuse_a_repeat(refused)
    assert RefusedAttempt.objects.filter(ticket=refused).count() == 1
    leave_an_intent_open(stale, overdue=True)
    leave_an_intent_open(fresh, overdue=False)

    with django_assert_num_queries(QUEUE_QUERIES):
        html = sam.get("/").content.decode()
    assert "Refused repeats" in html and "Open intents past their timeout" in html
    assert html.count('class="flag flag-refused"') == 1 and html.count('class="flag flag-intent"') == 1

    only_refused = sam.get("/", {"flags": QueueFlag.REFUSED}).content.decode()
    assert only_refused.count("data-row-link") == 1 and refused.ticket_id in only_refused
    only_stale = sam.get("/", {"flags": QueueFlag.STALE_INTENTS}).content.decode()
    assert only_stale.count("data-row-link") == 1 and stale.ticket_id in only_stale
    assert fresh.ticket_id not in only_stale and plain.ticket_id not in only_stale
    both = sam.get("/", {"flags": [QueueFlag.REFUSED, QueueFlag.STALE_INTENTS]}).content.decode()
    assert both.count("data-row-link") == 0
    # The queue's flags agree with the domain's own reads.
    assert [t.ticket_id for t in Ticket.objects.with_refused_attempts()] == [refused.ticket_id]
    assert [t.ticket_id for t in Ticket.objects.with_stale_intents()] == [stale.ticket_id]


def test_the_metrics_page_counts_refused_repeats_in_its_date_range(
    sam: Client, standard_class: TicketClass
) -> None:
    (ticket,) = make_tickets(standard_class, 1)
    refuse_a_repeat(ticket)
    old = RefusedAttempt.objects.create(
        ticket=ticket,
        actor_kind="agent",
        tool="issue_refund",
        item="kettle",
        request={},
        earlier_action_id="A1",
        message="repeat",
    )
    RefusedAttempt.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))
    html = sam.get("/metrics/").content.decode()
    card = html[html.index('id="refused-attempts"') :]
    assert '<span class="flag flag-refused">1</span>' in card[: card.index("</div>")]
    today = timezone.localdate()
    start = (today - timedelta(days=60)).isoformat()
    wide = sam.get("/metrics/", {"start": start, "end": today.isoformat()}).content.decode()
    assert '<span class="flag flag-refused">2</span>' in wide
    before = (today - timedelta(days=1)).isoformat()
    none = sam.get("/metrics/", {"start": before, "end": before}).content.decode()
    card = none[none.index('id="refused-attempts"') :]
    assert "<dd>0 " in card
