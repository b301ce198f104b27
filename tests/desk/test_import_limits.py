"""The importer's limits: size, nesting, the API's strict JSON, JSON Lines streamed, and no traceback for any input."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from desk.importer import ImportFileError, iter_tickets
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def _ticket(ticket_id: str = "T-1", args: str = '{"order": "SU-1"}') -> str:
    return (
        f'{{"ticket_id": "{ticket_id}", "order_id": "SU-1", "seller_type": "marketplace", '
        '"ticket_class": {"slug": "tiny", "token_budget": 4000, "compaction_threshold": 0.8}, '
        f'"turns": [{{"role": "tool_call", "tool": "lookup_order", "args": {args}}}]}}'
    )


def _import(tmp_path: Path, content: str | bytes, name: str = "in.json") -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(CommandError) as refused:
        call_command("import_tickets", str(path), stdout=StringIO(), stderr=StringIO())
    assert not Ticket.objects.exists()
    return str(refused.value)


@override_settings(SUNDRY_IMPORT_MAX_BYTES=1000)
def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    message = _import(tmp_path, _ticket() + " " * 2000)
    assert "over the 1000-byte limit" in message and "SUNDRY_IMPORT_MAX_BYTES" in message


def test_deep_nesting_is_a_clear_error_not_a_recursion_traceback(tmp_path: Path) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    message = _import(tmp_path, _ticket(args=f'{{"a": {deep}}}'))
    assert "not valid JSON" in message or "nested deeper" in message


def test_nesting_under_the_parsers_limit_but_over_the_importers_names_the_field(tmp_path: Path) -> None:
    message = _import(tmp_path, _ticket(args='{"a": ' + "[" * 40 + "]" * 40 + "}"))
    assert "nested deeper than 32 levels" in message and "turns[0].args.a" in message


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('{"amount": NaN}', "NaN is not valid JSON"),
        ('{"amount": Infinity}', "Infinity is not valid JSON"),
        ('{"amount": 1e400}', "turns[0].args.amount: 1e400 is out of range"),
        ('{"amount": 9223372036854775808}', "out of range for a 64-bit integer"),
        ('{"amount": 1, "amount": 2}', "the key 'amount' appears more than once"),
    ],
    ids=["nan", "infinity", "float-overflow", "int-past-64-bits", "duplicate-key"],
)
def test_the_api_strict_parser_refuses_what_the_api_refuses(tmp_path: Path, args: str, expected: str) -> None:
    assert expected in _import(tmp_path, _ticket(args=args))


def test_json_lines_are_streamed_and_a_bad_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text(
        "\n".join([_ticket("T-1"), _ticket("T-2"), '{"ticket_id": "T-3", "x": NaN}', _ticket("T-4")])
    )
    tickets = iter_tickets(path)
    # The first tickets come before the bad line is read: the file is not parsed whole.
    assert [next(tickets).ticket_id, next(tickets).ticket_id] == ["T-1", "T-2"]
    with pytest.raises(ImportFileError, match=r"line 3: .*NaN is not valid JSON"):
        next(tickets)
    message = _import(tmp_path, path.read_text(), name="many2.jsonl")
    assert "line 3" in message


def test_good_json_lines_import(tmp_path: Path) -> None:
    path = tmp_path / "good.jsonl"
    path.write_text("\n".join(_ticket(f"T-{n}") for n in range(3)) + "\n")
    out = StringIO()
    call_command("import_tickets", str(path), stdout=out)
    assert "imported 3 ticket(s)" in out.getvalue()
    assert Ticket.objects.count() == 3


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe\x00garbage",
        b"",
        b"   \n\n",
        b"1",
        b'"a string"',
        b"[1, 2]",
        b"{",
        b'{"ticket_id": 5}',
        b"null",
        b'{"a": 1}\n[1]\n',
        b'{"a": 1}\n{"b": \n',
        json.dumps({"turns": [{"role": "customer", "content": "x" * 10}] * 3}).encode(),
        b"[" * 100_000,
        b'{"ticket_id": "T-1", "order_id": "SU-1", "seller_type": "m", "ticket_class": "nope"}',
    ],
    ids=[
        "not-utf8",
        "empty",
        "blank",
        "number",
        "string",
        "list-of-numbers",
        "truncated",
        "wrong-type",
        "null",
        "lines-then-list",
        "lines-truncated",
        "no-ids",
        "open-brackets",
        "unknown-class",
    ],
)
def test_no_input_ends_in_a_traceback(tmp_path: Path, content: bytes) -> None:
    """Every one of these is a CommandError with a message (call_command raises anything else as it is)."""
    message = _import(tmp_path, content)
    assert "in.json" in message
