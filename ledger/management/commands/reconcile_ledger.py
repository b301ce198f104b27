from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ledger.services import reconcile_all


class Command(BaseCommand):
    help = (
        "Reconcile the payments ledger with every ticket's succeeded money actions (run it from cron: an action "
        "becomes unconfirmed once its grace period, SUNDRY_LEDGER_GRACE_MINUTES, has passed without an entry)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        counts = reconcile_all()
        self.stdout.write("reconciled: " + ", ".join(f"{key} {value}" for key, value in counts.items()))
