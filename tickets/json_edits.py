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


# Each edit as each database spells it: `{doc}` is the document so far (read once: edits nest, so an edit
# that read it twice would double the SQL at each level), `%s` the edit's value as JSON text, `{key}` and
# `{index}` the list and position. An append needs its list in the document.
SPELLINGS: dict[str, dict[str, str]] = {
    "postgresql": {
        # After the last element: the document is built once (jsonb_set of a concatenation built the list, then
        # the document: twice the time on a 300-action state). The list must be in the document (the caller
        # writes the whole document otherwise): jsonb_insert leaves a document without it as it was.
        "append": "jsonb_insert({doc}, '{{{key},-1}}', %s::jsonb, true)",
        "replace": "jsonb_set({doc}, '{{{key},{index}}}', %s::jsonb)",
        "remove": "({doc} #- '{{{key},{index}}}')",
        "set": "jsonb_set({doc}, '{{{key}}}', %s::jsonb)",
    },
    "sqlite": {
        "append": "json_insert({doc}, '$.{key}[#]', json(%s))",
        "replace": "json_set({doc}, '$.{key}[{index}]', json(%s))",
        "remove": "json_remove({doc}, '$.{key}[{index}]')",
        "set": "json_set({doc}, '$.{key}', json(%s))",
    },
}


assert all(t.count("{doc}") == 1 for spelling in SPELLINGS.values() for t in spelling.values())


def supported(vendor: str) -> bool:
    return vendor in SPELLINGS


class EditJSON(Func):
    """`column` with `edits` applied in order, computed by the database in the UPDATE that stores it."""

    output_field = JSONField()

    def __init__(self, column: str, edits: Sequence[JSONEdit]) -> None:
        super().__init__(F(column))
        self.edits = tuple(edits)

    def shape(self) -> tuple[Any, ...] | None:
        """What the SQL text depends on (the column and each edit's kind, list and index), for a statement
        reused with new values (tickets.write_batch); None for a column read through a relation."""
        column = self.source_expressions[0]
        if not isinstance(column, F) or "__" in column.name:
            return None
        return ("json", column.name, *((e.kind, e.key, e.index) for e in self.edits))

    def values(self, vendor: str) -> list[Any]:
        """The parameters as_sql sends, in its order."""
        spelling = SPELLINGS[vendor]
        return [json.dumps(e.value) for e in self.edits if "%s" in spelling[e.kind]]

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> Sql:  # type: ignore[override]
        spelling = SPELLINGS.get(connection.vendor)
        if spelling is None:
            raise NotSupportedError(f"JSON edits are not written for {connection.vendor}")
        sql, base_params = compiler.compile(self.source_expressions[0])
        params = list(base_params)
        for edit in self.edits:
            template = spelling[edit.kind]
            # The document's own parameters come first (it is read once), then the value's.
            params = params + ([json.dumps(edit.value)] if "%s" in template else [])
            sql = template.format(doc=sql, key=edit.key, index=edit.index)
        return sql, params
