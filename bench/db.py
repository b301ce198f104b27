"""Create the bench database when it is missing: `python -m bench.db URL` (PostgreSQL; SQLite needs nothing)."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql


def ensure_database(url: str) -> bool:
    """True when it had to be created."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return False
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return True


if __name__ == "__main__":
    if ensure_database(sys.argv[1]):
        print(f"==> created the bench database {urlsplit(sys.argv[1]).path.lstrip('/')}")
