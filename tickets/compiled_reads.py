"""Querysets compiled to SQL once per process and database, then run with new values.

The agent reads its context on every turn. Compiling that queryset (three joined tables, two JSON subqueries)
costs the ORM more than the database needs to answer it: about 2 ms of Python against 1 ms of PostgreSQL.
A `CompiledRead` builds its queryset once with placeholder values, keeps the compiler Django made for it, and
on each call swaps the real values into the compiled parameters and lets Django's own iterable turn the rows
into model instances (select_related, annotations, `values()` and converters as the ORM itself does them).

Only lookups whose value reaches the SQL as a parameter unchanged can take a placeholder (`=`, `>=`, `<` on a
text or integer column): the build fails loudly when a placeholder does not come out among the parameters.
A `select_for_update()` read must run inside a transaction, as its queryset must (Django's own check runs
when it is compiled, not on later calls).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.sql.compiler import SQLCompiler
from psycopg.sql import Literal

from tickets.prepared import PreparingConnection, prepared_cursor

# Values no caller passes: text no ticket id can hold; integers inside every integer column's range (Django
# drops a lookup whose value is out of its column's range) and far past any key or turn number.
_TEXT_PLACEHOLDER = "\uffff\ufffecompiled-read-{}\ufffe\uffff"
_INT_PLACEHOLDER = 2_147_483_000


def _placeholder(kind: type, index: int) -> object:
    if kind is str:
        return _TEXT_PLACEHOLDER.format(index)
    if kind is int:
        return _INT_PLACEHOLDER - index
    raise TypeError(f"a compiled read takes str or int values, not {kind.__name__}")


@dataclass(frozen=True)
class _Compiled:
    queryset: QuerySet[Any]
    compiler: SQLCompiler
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, ...], ...]  # where each value goes in `params` (a subquery may repeat it)


class _CompiledQuery:
    """The queryset's Query as its iterable sees it, but with the compiler already made for one call."""

    def __init__(self, query: Any, compiler: SQLCompiler) -> None:
        self._query = query
        self._compiler = compiler

    def get_compiler(self, using: str | None = None, connection: Any = None, elide_empty: bool = True) -> Any:
        return self._compiler

    def __getattr__(self, name: str) -> Any:  # the names ValuesIterable reads (values_select, ...)
        return getattr(self._query, name)


def _with_literals(compiled: _Compiled, connection: Any) -> tuple[str, tuple[int, ...]]:
    """The compiled SQL with every parameter but the values written in as a literal (PostgreSQL), and which
    of the original parameters the remaining placeholders stand for; elsewhere the SQL as it is."""
    everything = tuple(range(len(compiled.params)))
    pieces = compiled.sql.split("%s")
    if connection.vendor != "postgresql" or "%%" in compiled.sql or len(pieces) != len(everything) + 1:
        return compiled.sql, everything
    values = {place for places in compiled.slots for place in places}
    with connection.cursor() as cursor:
        raw = cursor.connection
        out, kept = [pieces[0]], []
        for i, (param, piece) in enumerate(zip(compiled.params, pieces[1:], strict=True)):
            if i in values:
                out.append("%s")
                kept.append(i)
            else:
                out.append(Literal(param).as_string(raw))
            out.append(piece)
    return "".join(out), tuple(kept)


class CompiledRead[M: Model]:
    """`build(*placeholders)` compiled once per database alias; `all(*values)` and `get(*values)` run it.

    `kinds` are the values' types (str or int), in the order `build` takes them.
    """

    def __init__(self, build: Callable[..., QuerySet[M]], *kinds: type) -> None:
        self._build = build
        self._kinds = kinds
        self._compiled: dict[str, _Compiled] = {}
        self._converters: dict[tuple[str, int], Any] = {}  # per alias and connection object
        self._plain: dict[
            str, tuple[str, tuple[int, ...]]
        ] = {}  # rows(): the SQL with its constants written in
        self._lock = threading.Lock()

    def _compile(self, alias: str) -> _Compiled:
        placeholders = [_placeholder(kind, i) for i, kind in enumerate(self._kinds)]
        queryset = self._build(*placeholders).using(alias)
        compiler = queryset.query.get_compiler(using=alias)
        # Filling compiler.select, klass_info and the annotations, as execute_sql would.
        sql, params = compiler.as_sql()
        slots = []
        for value in placeholders:
            found = tuple(i for i, p in enumerate(params) if p == value)
            if not found:
                raise ImproperlyConfigured(
                    f"a compiled read's placeholder {value!r} is not among its parameters: use it in a lookup "
                    "that passes the value through unchanged"
                )
            slots.append(found)
        return _Compiled(queryset, compiler, sql, tuple(params), tuple(slots))

    def _compiled_with(self, values: tuple[Any, ...], using: str) -> tuple[_Compiled, list[Any]]:
        """The compiled query (compiled on first use) and its parameters with these values in their slots."""
        if len(values) != len(self._kinds):
            raise TypeError(f"this compiled read takes {len(self._kinds)} values, not {len(values)}")
        compiled = self._compiled.get(using)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(using) or self._compile(using)
                self._compiled[using] = compiled
        params = list(compiled.params)
        for slots, value, kind in zip(compiled.slots, values, self._kinds, strict=True):
            if not isinstance(value, kind):
                raise TypeError(f"a compiled read's value {value!r} is not {kind.__name__}")
            for slot in slots:
                params[slot] = value
        return compiled, params

    def _queryset(self, values: tuple[Any, ...], using: str) -> QuerySet[M]:
        compiled, params = self._compiled_with(values, using)
        # A compiler of this call's own, on this thread's connection, answering with the compiled SQL.
        compiler = SQLCompiler.__new__(type(compiled.compiler))
        compiler.__dict__.update(compiled.compiler.__dict__)
        connection = connections[using]
        compiler.connection = PreparingConnection(connection)  # type: ignore[assignment]
        sql, bound = compiled.sql, tuple(params)
        compiler.as_sql = lambda *args, **kwargs: (sql, bound)  # type: ignore[method-assign]
        # The row converters depend on the selected columns and the connection only: found once per connection
        # object (Django looks them up again on every call: 64 lookups for the context's ticket).
        selected = [column for column, *_ in compiler.select[: compiler.col_count]]
        key = (using, id(connection))
        found = self._converters.get(key)
        if found is None:
            found = self._converters[key] = type(compiler).get_converters(compiler, selected)
        real = compiler.get_converters

        def converters(expressions: list[Any]) -> Any:
            same = len(expressions) == len(selected) and all(map(operator.is_, expressions, selected))
            return found if same else real(expressions)

        compiler.get_converters = converters  # type: ignore[method-assign]
        # A shallow copy of the built queryset (copy.copy would evaluate it) with that compiler.
        queryset: QuerySet[M] = QuerySet.__new__(type(compiled.queryset))
        queryset.__dict__.update(compiled.queryset.__dict__)
        queryset._result_cache = None
        # `_query`, not the `query` setter: that would turn a values_list() into values().
        queryset._query = _CompiledQuery(compiled.queryset.query, compiler)  # type: ignore[attr-defined]
        return queryset

    def rows(self, *values: Any, using: str = "default") -> list[tuple[Any, ...]]:
        """The rows as the database answers them, one tuple per row in the order of the selected columns (the
        model's own columns, then related ones): no model instances, no converters. For columns whose
        database value is already the Python value (text, integers), on the hottest reads.

        On PostgreSQL the query's constant parameters (JSON keys, statuses) are written into its SQL once, as
        literals: only the values are sent as parameters (17 adapted per call become 1 on the context read)."""
        compiled, given = self._compiled_with(values, using)
        plain = self._plain.get(using)
        if plain is None:
            plain = self._plain[using] = _with_literals(compiled, connections[using])
        sql, kept = plain
        params = [given[i] for i in kept]
        with prepared_cursor(connections[using]) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def iterator(self, *values: Any, using: str = "default") -> Iterator[M]:
        queryset = self._queryset(values, using)
        return iter(queryset._iterable_class(queryset))  # type: ignore[call-overload]

    def all(self, *values: Any, using: str = "default") -> list[M]:
        return list(self.iterator(*values, using=using))

    def get(self, *values: Any, using: str = "default") -> M:
        """The one row, or the model's DoesNotExist (MultipleObjectsReturned past one: slice the build [:2])."""
        rows = self.all(*values, using=using)
        model = self._compiled[using].queryset.model
        if not rows:
            raise model.DoesNotExist(f"{model._meta.object_name} matching query does not exist.")
        if len(rows) > 1:
            raise model.MultipleObjectsReturned(f"more than one {model._meta.object_name} matched")
        return rows[0]
