"""A write's independent UPDATEs and INSERTs sent as one statement on PostgreSQL, one by one elsewhere.

After a state change has its rows locked, what it writes (the state row, the audit row, the ticket's figures,
an action's idempotency answer) depends on nothing another of them returns: on PostgreSQL they go as data-
modifying CTEs of one statement (`WITH w0 AS (UPDATE ...), w1 AS (INSERT ...) SELECT 1`), one round trip for
all. Each part is compiled by Django's own UPDATE and INSERT compilers (field preparation, `auto_now_add`,
JSON adaptation as `update()` and `create()` do them); on any other database each runs as those calls would.

The parts see one snapshot and not one another's effects: only writes that touch different rows, and read
nothing another part writes, may share a batch. An inserted row gets no primary key back (nobody reads it).
Model signals are not sent for the rows written here (none of these models has a receiver).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.db.models import F, Model, QuerySet, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.sql import InsertQuery, UpdateQuery
from psycopg.types.json import Jsonb

from tickets.prepared import prepared_cursor

# A model's single-row INSERT of plain values, as Django compiled it the first time (per model and database).
_INSERT_SQL: dict[tuple[str, str], str] = {}


# An UPDATE of one row by its primary key, as Django compiled it the first time, per model, database and shape.
_UPDATE_SQL: dict[tuple[str, str, tuple[Any, ...]], str] = {}


def _shape(
    model: type[Model], values: dict[str, Any], connection: Any
) -> tuple[tuple[Any, ...], list[Any]] | None:
    """Each value's part of the statement's shape and its parameters, in the UPDATE's order; None when a value
    is an expression of another kind (the statement is then compiled as usual)."""
    shape: list[Any] = []
    params: list[Any] = []
    for name, value in values.items():
        field = model._meta.get_field(name)
        if hasattr(field, "get_placeholder"):
            return None
        if value is None:
            shape.append((name, "null"))
            # Django 6.1 sends "= %s" with None (checked against its compile before reuse).
            params.append(None)
        elif not hasattr(value, "resolve_expression"):
            shape.append((name, "value"))
            params.append(field.get_db_prep_save(value, connection=connection))  # type: ignore[union-attr]
        elif hasattr(value, "shape") and hasattr(value, "values"):
            part = value.shape()
            if part is None:
                return None
            shape.append((name, part))
            params.extend(value.values(connection.vendor))
        elif (
            isinstance(value, CombinedExpression)
            and value.connector == "+"
            and isinstance(value.lhs, F)
            and "__" not in (column := str(getattr(value.lhs, "name", "__")))
            and isinstance(value.rhs, Value)
            and type(value.rhs.value) is int
        ):
            shape.append((name, "add", column))
            params.append(value.rhs.value)
        else:
            return None
    return tuple(shape), params


def _comparable(params: Any) -> list[Any]:
    """Parameters as values: a JSON adapter (psycopg's Jsonb, equal only to itself) as its JSON text."""
    return [json.dumps(param.obj, sort_keys=True) if isinstance(param, Jsonb) else param for param in params]


class WriteBatch:
    """Collect `update`s and `insert`s, then `run` them: one statement on PostgreSQL."""

    def __init__(self, using: str = "default") -> None:
        self.using = using
        self._parts: list[tuple[str, tuple[Any, ...]]] = []
        self._plain: list[Callable[[], object]] = []

    @property
    def one_statement(self) -> bool:
        return connections[self.using].vendor == "postgresql"

    def __len__(self) -> int:
        return len(self._plain)

    def update(self, queryset: QuerySet[Any], **values: Any) -> None:
        """`queryset.update(**values)`, batched (the row count is not returned)."""
        queryset = queryset.using(self.using)
        self._plain.append(lambda: queryset.update(**values))
        if not self.one_statement:
            return
        query = queryset.query.chain(UpdateQuery)
        query.add_update_values(values)  # type: ignore[attr-defined]
        query.annotations = {}
        sql, params = query.get_compiler(self.using).as_sql()
        self._parts.append((sql, tuple(params)))

    def update_row(self, model: type[Model], pk: Any, **values: Any) -> None:
        """`model.objects.filter(pk=pk).update(**values)`, batched. The statement's text is compiled once per
        shape (the same columns, each a plain value, None, an F() plus a number, or one of the desk's edit
        expressions of the same kind) and reused with this call's values: an action's two UPDATEs no longer
        build and compile an UpdateQuery each, nor build the queryset (about 0.35 ms of CPU each) but to compile
        a shape first or to run elsewhere."""

        def queryset() -> QuerySet[Any]:
            return model._default_manager.filter(pk=pk)

        connection = connections[self.using]
        found = _shape(model, values, connection) if self.one_statement else None
        if found is None:
            self.update(queryset(), **values)
            return
        shape, params = found
        key = (model._meta.label, self.using, shape)
        params.append(model._meta.pk.get_db_prep_value(pk, connection))  # type: ignore[union-attr]
        sql = _UPDATE_SQL.get(key)
        if sql is None:
            self.update(queryset(), **values)
            compiled, compiled_params = self._parts[-1]
            if _comparable(compiled_params) == _comparable(
                params
            ):  # what the shape gives is what Django sends
                _UPDATE_SQL[key] = compiled
            return
        self._plain.append(lambda: queryset().update(**values))
        self._parts.append((sql, tuple(params)))

    def insert(self, obj: Model) -> None:
        """`obj.save(force_insert=True)` of a new row whose primary key the database assigns, batched."""
        meta = obj._meta
        self._plain.append(lambda: obj.save(force_insert=True, using=self.using))
        if not self.one_statement:
            return
        if obj.pk is not None:
            raise ValueError("a batched insert leaves the primary key to the database")
        fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field and not f.generated]
        connection = connections[self.using]
        values = [field.pre_save(obj, True) for field in fields]
        key = (meta.label, self.using)
        sql = _INSERT_SQL.get(key)
        if sql is not None and not any(hasattr(value, "resolve_expression") for value in values):
            # A row of plain values: the model's INSERT is the same text every time, only its values change.
            params = [
                field.get_db_prep_save(value, connection=connection)
                for field, value in zip(fields, values, strict=True)
            ]
            self._parts.append((sql, tuple(params)))
            return
        query = InsertQuery(meta.model)
        query.insert_values(fields, [obj])
        ((sql, params),) = query.get_compiler(self.using).as_sql()
        plain = not any(hasattr(v, "resolve_expression") for v in values) and not any(
            hasattr(f, "get_placeholder") for f in fields
        )
        if plain and len(params) == len(fields):
            _INSERT_SQL[key] = sql
        self._parts.append((sql, tuple(params)))

    def run(self) -> None:
        """Send what was collected: one statement on PostgreSQL, each write on its own elsewhere."""
        if not self._plain:
            return
        if not self.one_statement:
            for write in self._plain:
                write()
        elif len(self._parts) == 1:
            with prepared_cursor(connections[self.using]) as cursor:
                cursor.execute(*self._parts[0])
        else:
            ctes = ", ".join(f"w{n} AS ({sql})" for n, (sql, _) in enumerate(self._parts))
            params = [p for _, part in self._parts for p in part]
            with prepared_cursor(connections[self.using]) as cursor:
                cursor.execute(f"WITH {ctes} SELECT 1", params)
        self._parts.clear()
        self._plain.clear()
