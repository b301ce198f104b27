from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DeskError
from ledger.importer import FORMATS, guess_format, parse_csv, parse_jsonl
from ledger.models import LedgerSource
from ledger.services import ingest_ledger_entries


class Command(BaseCommand):
    help = (
        "Import payments ledger entries from a CSV file (header: id,ticket_id,order_id,kind,amount_cents,"
        "currency,created_at,external_ref) or JSON Lines, then reconcile their orders. The whole file is "
        "validated first: any error names its line and field, and nothing is written. Entries already held "
        "(same id, same content) are skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="The ledger file (.csv, or .jsonl / .ndjson)")
        parser.add_argument("--format", choices=FORMATS, help="Overrides the guess from the file's extension")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        fmt = options["format"] or guess_format(path.name)
        if fmt is None:
            raise CommandError(
                f"{path}: cannot tell the format from the name; pass --format csv or --format jsonl"
            )
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except FileNotFoundError:
            raise CommandError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise CommandError(f"{path}: is a directory") from None
        except OSError as exc:
            raise CommandError(f"{path}: cannot read it ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path}: not UTF-8 text (byte {exc.start})") from None
        try:
            entries = parse_csv(text) if fmt == "csv" else parse_jsonl(text)
            result = ingest_ledger_entries(entries=entries, source=LedgerSource.IMPORT)
        except DeskError as exc:
            lines = [f"{path}: {len(exc.detail.get('errors', []))} error(s), nothing written"]
            lines += [
                f"  {e['where']}: {e['field'] + ': ' if e['field'] else ''}{e['message']}"
                for e in exc.detail.get("errors", [])
            ] or [f"  {exc.message}"]
            raise CommandError("\n".join(lines)) from None
        outcomes = ", ".join(f"{key} {value}" for key, value in result.outcomes.items())
        self.stdout.write(
            f"{path}: {len(result.created)} entries imported, {len(result.duplicates)} already held"
            + (f"; reconciled: {outcomes}" if outcomes else "")
        )
