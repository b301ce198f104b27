"""Delivery runs as a django.tasks task (as compaction does): inline with the immediate backend, on the
worker with django-tasks-db. A retry is queued for its `next_attempt_at` when the backend can defer; the
`deliver_notifications` command delivers whatever is due, so nothing is lost if a worker dies."""

from __future__ import annotations

from typing import Any

from django.tasks import task, task_backends
from django.utils import timezone

from notify.delivery import deliver
from notify.models import Notification


@task()
def deliver_notification_task(*, notification_pk: int) -> dict[str, Any]:
    """One attempt, when it is due and no other worker holds it; queues the next when it failed."""
    notification = deliver(notification_pk)
    if notification is None:
        return {"status": "not due"}
    schedule(notification)
    return {"status": notification.status, "attempts": notification.attempts}


def schedule(notification: Notification) -> None:
    """Queue the next attempt of a pending notification: now when it is due, at `next_attempt_at` when the
    backend defers; otherwise the periodic command takes it when it is due."""
    if notification.status != "pending" or notification.next_attempt_at is None:
        return
    due = notification.next_attempt_at <= timezone.now()
    task_ = deliver_notification_task
    if not due:
        if not task_backends[task_.backend].supports_defer:
            return
        task_ = task_.using(run_after=notification.next_attempt_at)
    task_.enqueue(notification_pk=notification.pk)
