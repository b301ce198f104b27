"""The wire counter (bench/wire.py): round trips and statements as PostgreSQL sees them, on a real connection."""

from __future__ import annotations

import struct

import psycopg
import pytest
from django.conf import settings

from bench.wire import FrontendParser, WireCounter


def _message(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack("!I", len(payload) + 4) + payload


def test_the_parser_reads_the_startup_then_typed_messages_split_anywhere() -> None:
    startup = struct.pack("!II", 8 + 5, 196608) + b"user\x00"
    stream = (
        startup + _message(b"Q", b"SELECT 1\x00") + _message(b"P", b"\x00x\x00\x00\x00") + _message(b"S", b"")
    )
    parser = FrontendParser()
    seen: list[str] = []
    for i in range(0, len(stream), 3):  # three bytes at a time: no message arrives whole
        seen += parser.feed(stream[i : i + 3])
    assert seen == ["startup", "Q", "P", "S"]


def test_an_ssl_request_is_not_the_startup() -> None:
    parser = FrontendParser()
    assert parser.feed(struct.pack("!II", 8, 80877103)) == ["ssl_request"]
    assert parser.feed(struct.pack("!II", 8 + 5, 196608) + b"user\x00") == ["startup"]


@pytest.mark.postgres
@pytest.mark.django_db
def test_round_trips_on_a_real_connection_count_each_statement_and_a_pipeline_once() -> None:
    db = settings.DATABASES["default"]
    with WireCounter((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))) as wire:
        dsn = f"host=127.0.0.1 port={wire.port} dbname={db['NAME']} user={db['USER']} password={db['PASSWORD']} sslmode=disable"
        with psycopg.connect(dsn, autocommit=True) as conn:
            before = wire.snapshot()
            conn.execute("SELECT 1")
            conn.execute("SELECT %s::int", [2])
            conn.execute("SELECT 3")
            three = wire.snapshot().minus(before)
            before = wire.snapshot()
            with conn.pipeline():
                conn.execute("SELECT 4")
                conn.execute("SELECT %s::int", [5])
            piped = wire.snapshot().minus(before)
        assert three.round_trips == 3 and three.statements == 3 and three.connections == 0
        assert piped.statements == 2 and piped.round_trips == 1  # both sent before the answers are read
        assert wire.snapshot().connections == 1
