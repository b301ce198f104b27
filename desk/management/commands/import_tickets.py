from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from desk.importer import ImportFileError, import_ticket, load_file


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
        # Validate every file before writing anything: a malformed file leaves the database as it was.
        try:
            batches = [(path, load_file(path)) for path in options["paths"]]
        except ImportFileError as exc:
            raise CommandError(str(exc)) from None
        total = sum(len(docs) for _, docs in batches)
        done = 0
        refused: list[str] = []
        for path, docs in batches:
            if options["continue_on_error"]:
                for doc in docs:
                    try:
                        report = import_ticket(doc, source=str(path))
                    except ImportFileError as exc:
                        refused.append(str(exc))
                        self.stderr.write(f"refused: {exc}")
                        continue
                    done += 1
                    self.stdout.write(f"[{done}/{total}] {report.line()}")
                continue
            # All or nothing per file: a refusal of syntax or meaning leaves the database as it was.
            try:
                with transaction.atomic():
                    lines = [import_ticket(doc, source=str(path)).line() for doc in docs]
            except ImportFileError as exc:
                raise CommandError(
                    f"{exc} (nothing of {path} was written; {done} ticket(s) of earlier files imported)"
                ) from None
            for line in lines:
                done += 1
                self.stdout.write(f"[{done}/{total}] {line}")
        if refused:
            self.stdout.write(self.style.WARNING(f"imported {done} ticket(s); refused {len(refused)}:"))
            for line in refused:
                self.stdout.write(f"  {line}")
            return
        self.stdout.write(self.style.SUCCESS(f"imported {done} ticket(s)"))
