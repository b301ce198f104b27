"""manage.py import_ledger FILE: CSV or JSON Lines, validated whole, errors naming line and field, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import LedgerEntry, LedgerSource, Reconciliation
from tests.ledger.conftest import entry, refund
from tickets.models import Ticket

pytestmark = pytest.mark.django_db
HEADER = "id,ticket_id,order_id,kind,amount_cents,currency,created_at,external_ref\n"


def run(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    call_command("import_ledger", str(path))
    return capsys.readouterr().out


def test_a_csv_file_is_imported_and_reconciled(tmp_path: Path, ticket: Ticket, capsys) -> None:
    a1 = refund(ticket, "k1")
    at = entry("x")["created_at"]
    path = tmp_path / "ledger.csv"
    path.write_text(HEADER + f"ev_1,T-1,,refund,4000,USD,{at},\nev_2,,SU-1,credit,500,USD,{at},cr_9\n")
    out = run(path, capsys)
    assert "2 entries imported, 0 already held" in out and "matched 1" in out and "unrecorded 1" in out
    assert set(LedgerEntry.objects.values_list("entry_id", "source", "external_ref")) == {
        ("ev_1", LedgerSource.IMPORT, ""),
        ("ev_2", LedgerSource.IMPORT, "cr_9"),
    }
    assert Reconciliation.objects.get(entry__entry_id="ev_1").action_id == a1


def test_a_jsonl_file_is_imported_and_a_second_run_holds_it_already(
    tmp_path: Path, ticket: Ticket, capsys
) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(entry("ev_1")) + "\n\n" + json.dumps(entry("ev_2", kind="charge")) + "\n")
    assert "2 entries imported" in run(path, capsys)
    assert "0 entries imported, 2 already held" in run(path, capsys)
    assert LedgerEntry.objects.count() == 2


def test_csv_errors_name_the_line_and_field_and_nothing_is_written(tmp_path: Path, ticket: Ticket) -> None:
    at = entry("x")["created_at"]
    path = tmp_path / "ledger.csv"
    path.write_text(
        HEADER
        + f"ev_1,T-1,,refund,4000,USD,{at},\n"
        + f"ev_2,T-1,,refund,forty,USD,{at},\n"
        + "ev_3,T-1,,refund,100,USD,yesterday,\n"
        + f"ev_4,,,refund,100,USD,{at},\n"
    )
    with pytest.raises(CommandError) as caught:
        call_command("import_ledger", str(path))
    message = str(caught.value)
    assert "nothing written" in message
    assert "line 3: amount_cents:" in message
    assert "line 4: created_at:" in message
    assert "line 5: " in message and "ticket_id or order_id" in message
    assert not LedgerEntry.objects.exists()


def test_jsonl_errors_name_the_line(tmp_path: Path, ticket: Ticket) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_text(
        json.dumps(entry("ev_1")) + "\n{oops\n" + json.dumps(entry("ev_2", surprise=1)) + "\n[]\n"
    )
    with pytest.raises(CommandError) as caught:
        call_command("import_ledger", str(path))
    message = str(caught.value)
    assert "line 2: not valid JSON" in message
    assert "line 3: surprise: unknown field" in message
    assert "line 4: an entry is a JSON object" in message
    assert not LedgerEntry.objects.exists()


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("ledger.txt", b"", "cannot tell the format"),
        ("missing.csv", None, "no such file"),
        ("latin.csv", b"\xff\xfe\x00", "not UTF-8"),
        ("empty.csv", b"", "a header row is required"),
        ("header.csv", HEADER.encode(), "only a header row"),
        ("cols.csv", b"id,amount,when\n1,2,3\n", "unknown column"),
        ("empty.jsonl", b"\n\n", "no entries"),
        ("nul.csv", (HEADER + "ev\x00,T-1,,refund,1,USD,2026-01-01T00:00:00Z,\n").encode(), "line 2"),
    ],
)
def test_no_input_gives_a_traceback(
    tmp_path: Path, ticket: Ticket, name: str, content: bytes | None, expected: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CommandError) as caught:
        call_command("import_ledger", str(path))
    assert expected in str(caught.value)
    assert not LedgerEntry.objects.exists()


def test_a_directory_is_a_clear_error(tmp_path: Path, ticket: Ticket) -> None:
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(CommandError, match="is a directory"):
        call_command("import_ledger", str(tmp_path / "dir.csv"))
