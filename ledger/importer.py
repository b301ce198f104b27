"""`import_ledger`'s formats: CSV with a header row, or JSON Lines (one entry object a line).

The columns and keys are the webhook's entry fields. The whole file is parsed and validated first; any
error is reported with its line and field and nothing is written.
"""

from __future__ import annotations

import csv
import io
import json

from pydantic import ValidationError

from ledger.entries import ENTRY_FIELDS, EntryIn, csv_row_to_json, entry_errors, parse_entry
from ledger.services import EntryError, refuse

FORMATS = ("csv", "jsonl")


def guess_format(name: str) -> str | None:
    lowered = name.lower()
    if lowered.endswith(".csv"):
        return "csv"
    if lowered.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    return None


def collect_entry(
    where: str, data: object, entries: list[tuple[str, EntryIn]], errors: list[EntryError]
) -> None:
    """Validate one entry: append it to `entries`, or its errors (naming each field) to `errors`."""
    try:
        entries.append((where, parse_entry(data)))
    except ValidationError as exc:
        for line in entry_errors(exc):
            field, _, message = line.partition(": ")
            errors.append(EntryError(where, field, message))
    except ValueError as exc:
        errors.append(EntryError(where, "", str(exc)))


def refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def parse_jsonl(text: str) -> list[tuple[str, EntryIn]]:
    entries: list[tuple[str, EntryIn]] = []
    errors: list[EntryError] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            data = json.loads(line, parse_constant=refuse_constant)
        except ValueError as exc:
            errors.append(EntryError(where, "", f"not valid JSON: {exc}"))
            continue
        collect_entry(where, data, entries, errors)
    if errors:
        raise refuse(errors)
    if not entries:
        raise refuse([EntryError("file", "", "no entries in it")])
    return entries


def parse_csv(text: str) -> list[tuple[str, EntryIn]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [name.strip() for name in reader.fieldnames or []]
    unknown = [name for name in header if name not in ENTRY_FIELDS]
    if not header:
        raise refuse([EntryError("line 1", "", f"a header row is required: {','.join(ENTRY_FIELDS)}")])
    if unknown:
        raise refuse(
            [
                EntryError("line 1", name, f"unknown column (the columns are {', '.join(ENTRY_FIELDS)})")
                for name in unknown
            ]
        )
    entries: list[tuple[str, EntryIn]] = []
    errors: list[EntryError] = []
    try:
        for row in reader:
            where = f"line {reader.line_num}"
            collect_entry(where, csv_row_to_json(row), entries, errors)
    except csv.Error as exc:
        errors.append(EntryError(f"line {reader.line_num}", "", f"not valid CSV: {exc}"))
    if errors:
        raise refuse(errors)
    if not entries:
        raise refuse([EntryError("file", "", "no entries in it (only a header row)")])
    return entries
