"""Run periodically (cron, a systemd timer, every minute): records open intents past their limit, then
delivers every notification whose next attempt is due. A notification a dead worker held is due again once
its lease passes, so nothing is lost."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from notify.delivery import deliver, due
from notify.intents import check_stale_intents


class Command(BaseCommand):
    help = "Record intents past their limit and deliver (or retry) the notifications that are due."

    def handle(self, *args: Any, **options: Any) -> None:
        stale = check_stale_intents()
        delivered = failed = pending = 0
        for pk in due():
            notification = deliver(pk)
            if notification is None:
                continue  # another worker took it
            if notification.status == "delivered":
                delivered += 1
            elif notification.status == "failed":
                failed += 1
            else:
                pending += 1
        self.stdout.write(
            f"{len(stale)} intent(s) past their limit recorded; {delivered} delivered, "
            f"{pending} to retry, {failed} given up"
        )
