"""Prepared statements for the desk's hot statements on PostgreSQL.

Django binds parameters on the client and turns psycopg's prepared statements off, so every request's SQL is
parsed and planned again by the database: for the context's ticket read, a third of its time. The agent's
hot statements (the compiled reads, the touched actions, an action's and a settle's one write) run instead on a
cursor that binds on the server, which psycopg prepares once the same statement has run `prepare_threshold`
times on a connection (5; sundry.settings sets it): the database then plans it once per connection. Django's own
cursors are untouched. A pooler in transaction mode that does not keep prepared statements (PgBouncer before
1.21, or without max_prepared_statements) needs DATABASE_PREPARED_STATEMENTS=0: then Django's cursor is used.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorWrapper


def prepares(connection: BaseDatabaseWrapper) -> bool:
    return connection.vendor == "postgresql" and bool(settings.DATABASE_PREPARED_STATEMENTS)


def prepared_cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor whose statements psycopg prepares (on PostgreSQL, unless turned off), else Django's own; either
    way wrapped as Django wraps its cursors (queries logged and counted, errors mapped)."""
    if not prepares(connection):
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        # (django-stubs declare the cursor class without its connection argument.)
        cursor = ServerBindingCursor(connection.connection)  # type: ignore[call-arg]
        return connection._prepare_cursor(cursor)  # type: ignore[attr-defined,no-any-return]


class PreparingConnection:
    """A database connection whose `cursor()` is `prepared_cursor`: what a compiled read's compiler runs on, so
    that Django's own row handling reads a prepared statement's rows. Everything else is the connection's."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.__dict__["_connection"] = connection

    def cursor(self) -> CursorWrapper:
        return prepared_cursor(self._connection)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)
