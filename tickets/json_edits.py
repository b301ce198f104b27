"""Edits of a JSON column made by the database, so that a change to one item of the pinned state sends that
item, not the whole state: append to a list, replace or remove the item at an index, set a top-level value.

PostgreSQL (jsonb) and SQLite (JSON1) spell them differently; any other database gets `supported() is False`
and the caller writes the whole document instead. Keys come from the state's fixed list names and indexes
are integers, so both are written into the SQL; values are always parameters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Func, JSONField
from django.db.models.sql.compiler import SQLCompiler

Sql = tuple[str, list[Any]]


@dataclass(frozen=True)
class JSONEdit:
    kind: Literal["append", "replace", "remove", "set"]
    key: str
    index: int | None = None
    value: Any = None

    def __post_init__(self) -> None:
        if not self.key.isidentifier():
            raise ValueError(f"a JSON edit's key must be a plain name, not {self.key!r}")
        if self.kind in ("replace", "remove") and not isinstance(self.index, int):
            raise ValueError(f"a {self.kind} needs an integer index")


def supported(vendor: str) -> bool:
    return vendor in ("postgresql", "sqlite")


class EditJSON(Func):
    """`column` with `edits` applied in order, computed by the database in the UPDATE that stores it."""

    output_field = JSONField()

    def __init__(self, column: str, edits: Sequence[JSONEdit]) -> None:
        super().__init__(F(column))
        self.edits = tuple(edits)

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> Sql:  # type: ignore[override]
        raise NotSupportedError(f"JSON edits are not written for {connection.vendor}")

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> Sql:
        sql, base_params = compiler.compile(self.source_expressions[0])
        params = list(base_params)
        for edit in self.edits:
            value = json.dumps(edit.value)
            if edit.kind == "append":
                sql = (
                    f"jsonb_set({sql}, '{{{edit.key}}}', "
                    f"COALESCE({sql} -> '{edit.key}', '[]'::jsonb) || jsonb_build_array(%s::jsonb))"
                )
                params = [*params, *params, value]
            elif edit.kind == "replace":
                sql = f"jsonb_set({sql}, '{{{edit.key},{edit.index}}}', %s::jsonb)"
                params = [*params, value]
            elif edit.kind == "remove":
                sql = f"({sql} #- '{{{edit.key},{edit.index}}}')"
            else:
                sql = f"jsonb_set({sql}, '{{{edit.key}}}', %s::jsonb)"
                params = [*params, value]
        return sql, params

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> Sql:  # type: ignore[override]
        sql, base_params = compiler.compile(self.source_expressions[0])
        params = list(base_params)
        for edit in self.edits:
            value = json.dumps(edit.value)
            if edit.kind == "append":
                sql = f"json_insert({sql}, '$.{edit.key}[#]', json(%s))"
                params = [*params, value]
            elif edit.kind == "replace":
                sql = f"json_set({sql}, '$.{edit.key}[{edit.index}]', json(%s))"
                params = [*params, value]
            elif edit.kind == "remove":
                sql = f"json_remove({sql}, '$.{edit.key}[{edit.index}]')"
            else:
                sql = f"json_set({sql}, '$.{edit.key}', json(%s))"
                params = [*params, value]
        return sql, params
