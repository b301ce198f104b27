from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from desk.importer import ImportFileError, check_tickets, import_ticket, iter_tickets


class Command(BaseCommand):
    help = (
        "Import tickets in the sundry-ticket/1 format (one object, a list, or JSON Lines per file). "
        "Each file is all or nothing unless --continue-on-error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument(
            "--continue-on-error",
            action="store_true",
            help="import the good tickets of each file and list the refused ones, instead of refusing the file",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Validate every file before writing anything: a malformed file leaves the database as it was. Files are
        # read as streams (JSON Lines a line at a time), here and in each pass below: memory holds one ticket.
        paths: list[Path] = options["paths"]
        try:
            total = sum(sum(1 for _ in iter_tickets(path)) for path in paths)
        except ImportFileError as exc:
            raise CommandError(str(exc)) from None
        done = 0
        refused: list[str] = []
        for path in paths:
            if options["continue_on_error"]:
                for doc in iter_tickets(path):
                    try:
                        report = import_ticket(doc, source=str(path))
                    except ImportFileError as exc:
                        refused.append(str(exc))
                        self.stderr.write(f"refused: {exc}")
                        continue
                    done += 1
                    self.stdout.write(f"[{done}/{total}] {report.line()}")
                continue
            # All or nothing per file: the whole file is checked (and rolled back) first, so a refusal of
            # syntax or meaning leaves the database as it was; then each ticket is written turn by turn.
            try:
                check_tickets(iter_tickets(path), source=str(path))
            except ImportFileError as exc:
                raise CommandError(
                    f"{exc} (nothing of {path} was written; {done} ticket(s) of earlier files imported)"
                ) from None
            for doc in iter_tickets(path):
                try:
                    line = import_ticket(doc, source=str(path), checked=True).line()
                except ImportFileError as exc:  # the check passed: something changed meanwhile
                    raise CommandError(f"{exc} ({done} ticket(s) imported before it)") from None
                done += 1
                self.stdout.write(f"[{done}/{total}] {line}")
        if refused:
            self.stdout.write(self.style.WARNING(f"imported {done} ticket(s); refused {len(refused)}:"))
            for line in refused:
                self.stdout.write(f"  {line}")
            return
        self.stdout.write(self.style.SUCCESS(f"imported {done} ticket(s)"))
