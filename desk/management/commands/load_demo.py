from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from desk.demo import demo_ledger, demo_status, generated_ticket, reference_ticket_path, seed_class
from desk.importer import ImportTicket, import_ticket, load_file
from ledger.entries import parse_entry
from ledger.models import LedgerEntry, LedgerSource
from ledger.services import ingest_ledger_entries, reconcile_orders
from tickets.accounts import (
    ADMIN,
    SUPERVISOR,
    authenticate_agent_token,
    create_agent,
    create_person,
    issue_agent_token,
    revoke_agent_tokens,
)
from tickets.models import Ticket, TicketClass
from tickets.services.actors import SYSTEM
from tickets.services.classes import save_ticket_class
from tickets.services.lifecycle import set_ticket_status

DEMO_PEOPLE = [("supervisor", "supervisor-demo", SUPERVISOR), ("admin", "admin-demo", ADMIN)]


class Command(BaseCommand):
    help = "Load the demo data (T-40118 and generated tickets) and demo users; safe to run again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tickets", type=int, default=36, help="how many generated tickets (default 36)")

        parser.add_argument(
            "--token-file",
            type=Path,
            default=Path(settings.SUNDRY_DEMO_TOKEN_FILE),
            help="where the demo agent's token is kept between runs (SUNDRY_DEMO_TOKEN_FILE)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError(
                "load_demo refuses to run with SUNDRY_ENV=production: it creates demo users with known passwords"
            )
        path = reference_ticket_path()
        reference_class = seed_class()
        if not TicketClass.objects.filter(slug=reference_class["slug"]).exists():
            save_ticket_class(ticket_class=TicketClass(**reference_class), by=None)
        # The reference ticket runs on the seed's class: its compaction replays the seed's lossy summary
        # (or, with SUNDRY_DEMO_SUMMARIZER=openai, a real model writes it).
        docs = [d.model_copy(update={"ticket_class": reference_class["slug"]}) for d in load_file(path)]
        wanted = docs + [ImportTicket.model_validate(generated_ticket(i)) for i in range(options["tickets"])]
        existing = set(
            Ticket.objects.filter(ticket_id__in=[d.ticket_id for d in wanted]).values_list(
                "ticket_id", flat=True
            )
        )
        todo = [d for d in wanted if d.ticket_id not in existing]
        if existing:
            self.stdout.write(f"{len(existing)} demo ticket(s) already loaded")
        statuses = {f"T-{50000 + i}": demo_status(i) for i in range(options["tickets"])}
        for number, doc in enumerate(todo, start=1):
            report = import_ticket(doc, source=str(path) if doc in docs else "generated")
            status = statuses.get(doc.ticket_id, "open")
            if status != "open":
                set_ticket_status(
                    ticket=Ticket.objects.get(ticket_id=doc.ticket_id), status=status, by=SYSTEM
                )
            self.stdout.write(
                f"[{number}/{len(todo)}] {report.line()}" + (f", {status}" if status != "open" else "")
            )

        self.load_ledger(options["tickets"])

        for username, password, role in DEMO_PEOPLE:
            if not User.objects.filter(username=username).exists():
                create_person(username=username, password=password, role=role)
        token, note = self._demo_token(options["token_file"])
        self.stdout.write(
            self.style.SUCCESS(
                "demo users: supervisor / supervisor-demo, admin / admin-demo (log in at /accounts/login/)\n"
                f"demo agent API token ({note}): {token}"
            )
        )

    def load_ledger(self, count: int) -> None:
        """The demo's payments ledger, reconciled as the hourly `reconcile_ledger` run would see it once the
        grace period has passed: the refund the ledger never saw is then unconfirmed."""
        if LedgerEntry.objects.filter(source=LedgerSource.DEMO).exists():
            self.stdout.write("demo ledger already loaded")
            return
        now = timezone.now()
        entries = [
            (f"demo entry {i}", parse_entry(e)) for i, e in enumerate(demo_ledger(count, at=now.isoformat()))
        ]
        ingest_ledger_entries(entries=entries, source=LedgerSource.DEMO)
        after_grace = now + timedelta(minutes=settings.SUNDRY_LEDGER_GRACE_MINUTES + 1)
        counts = reconcile_orders(
            order_ids={e.order_id or "" for _, e in entries} | self.demo_orders(count), now=after_grace
        )
        self.stdout.write("demo ledger: " + ", ".join(f"{key} {value}" for key, value in counts.items()))

    def demo_orders(self, count: int) -> set[str]:
        ids = [f"T-{50000 + i}" for i in range(count)]
        return set(Ticket.objects.filter(ticket_id__in=ids).values_list("order_id", flat=True))

    def _demo_token(self, token_file: Path) -> tuple[str, str]:
        """The demo agent's token, the same run after run: tokens are stored hashed, so the key is kept in
        `token_file` (development only) and reused while it still authenticates as the demo agent."""
        try:
            kept = token_file.read_text().strip()
        except OSError:
            kept = ""
        found = authenticate_agent_token(key=kept) if kept else None
        if found is not None and found.user.username == "demo-agent":
            return kept, f"unchanged, kept in {token_file}"
        demo_agent = User.objects.filter(username="demo-agent").first()
        if demo_agent is None:
            token, note = create_agent(name="demo-agent"), "new"
        else:
            revoke_agent_tokens(username="demo-agent")
            token = issue_agent_token(user=demo_agent)
            note = "NEW: the earlier demo agent token was revoked"
        try:
            token_file.parent.mkdir(parents=True, exist_ok=True)
            token_file.write_text(token + "\n")
            os.chmod(token_file, 0o600)
        except OSError as exc:
            return token, f"{note}; not kept: {exc}"
        return token, f"{note}, kept in {token_file}"
