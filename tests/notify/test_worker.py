"""With django-tasks-db, the request only queues the delivery; the worker sends it and queues its retry for
`next_attempt_at` (the backend defers), so a 500 then a 200 ends delivered with no periodic command."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from notify.models import Channel, Delivery, Notification
from tests.factories import chat
from tests.notify.conftest import Answer
from tickets.errors import RepeatRefused
from tickets.models import TicketClass
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db(transaction=True)

DB_TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


def work() -> None:
    call_command("db_worker", "--batch", "--no-startup-delay", stdout=StringIO(), stderr=StringIO())


@override_settings(TASKS=DB_TASKS)
def test_the_worker_delivers_and_retries_at_next_attempt_at(receiver: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    hook = receiver([Answer(500), Answer(200)])
    ticket_class = TicketClass.objects.create(slug="worker-8k", token_budget=8000, compaction_threshold=0.8)
    Channel.objects.create(ticket_class=ticket_class, name="#w", url=hook.url, secret="s-worker")
    ticket = open_ticket(
        ticket_id="T-W", order_id="SU-W", seller_type="marketplace", ticket_class=ticket_class
    )
    chat(ticket, 2)
    fields: dict[str, Any] = dict(
        tool="issue_refund", item="lamp", amount_cents=1500, at_turn=1, reversible=False
    )
    record_action(ticket=ticket, idempotency_key="w1", **fields)
    with pytest.raises(RepeatRefused):
        record_action(ticket=ticket, idempotency_key="w2", **fields)

    notification = Notification.objects.get()
    assert hook.received == [] and DBTaskResult.objects.count() == 1  # queued, not sent in the request
    work()
    notification.refresh_from_db()
    assert notification.attempts == 1 and notification.status == "pending" and len(hook.received) == 1
    retry = DBTaskResult.objects.filter(status="READY").get()
    assert retry.run_after == notification.next_attempt_at
    work()  # not due yet: the worker leaves it
    assert len(hook.received) == 1
    past = timezone.now() - timedelta(seconds=1)
    DBTaskResult.objects.filter(pk=retry.pk).update(run_after=past)
    Notification.objects.filter(pk=notification.pk).update(next_attempt_at=past)
    work()
    notification.refresh_from_db()
    assert notification.status == "delivered" and notification.attempts == 2 and len(hook.received) == 2
    assert list(Delivery.objects.values_list("status_code", flat=True)) == [500, 200]
