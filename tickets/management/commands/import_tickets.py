from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tickets.importer import ImportFileError, import_ticket, load_file


class Command(BaseCommand):
    help = "Import tickets in the sundry-ticket/1 format (one object, a list, or JSON Lines per file)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        # Validate every file before writing anything: a malformed file leaves the database as it was.
        try:
            batches = [(path, load_file(path)) for path in options["paths"]]
        except ImportFileError as exc:
            raise CommandError(str(exc)) from None
        total = sum(len(docs) for _, docs in batches)
        done = 0
        for path, docs in batches:
            for doc in docs:
                try:
                    report = import_ticket(doc, source=str(path))
                except ImportFileError as exc:
                    raise CommandError(
                        f"{exc} (nothing of this ticket was written; {done} imported before it)"
                    ) from None
                done += 1
                self.stdout.write(f"[{done}/{total}] {report.line()}")
        self.stdout.write(self.style.SUCCESS(f"imported {done} ticket(s)"))
