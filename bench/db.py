"""A fresh bench database for every run: `python -m bench.db URL` drops it and creates it again (PostgreSQL;
SQLite needs nothing). It is scratch: a schema left by another checkout's migrations must not stop a run."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql


def recreate_database(url: str) -> bool:
    """Drop the database named by `url` if it exists and create it empty; False for a non-PostgreSQL URL."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return False
    name = parts.path.lstrip("/")
    if name in ("postgres", "template0", "template1"):
        raise SystemExit(f"refusing to drop {name!r}: give the bench a database of its own")
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return True


if __name__ == "__main__":
    if recreate_database(sys.argv[1]):
        print(f"==> created the bench database {urlsplit(sys.argv[1]).path.lstrip('/')} afresh")
