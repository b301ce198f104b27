"""The pinned state's served texts (core.state_text) in their columns: written in full, or edited in place by
the database (PinnedState.served_text joins them for a read).

An edit names the item's whole old text (it holds the item's unique id): the database finds it between
commas and replaces or removes it. When it is not there, the column becomes NULL rather than wrong, and the
row's texts stop being trusted (reads build the state from its items; the next change writes them in full).
PostgreSQL and SQLite spell the edits; elsewhere the caller writes the texts in full.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal

from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Func, IntegerField, TextField
from django.db.models.sql.compiler import SQLCompiler

from core.state import MONEY_TOTALS
from core.state_text import list_texts, tail_text
from tickets.models import SERVED_COLUMNS, SERVED_TAIL

# Each database's spelling: `{col}` the column (read once per edit), `%s` the values.
_SPELLINGS = {
    "postgresql": {
        "append": "ltrim({col} || ',' || %s, ',')",
        "swap": "(CASE WHEN strpos(',' || {col} || ',', %s) > 0 THEN btrim(replace(',' || {col} || ',', %s, %s), ',') END)",
    },
    "sqlite": {
        "append": "ltrim({col} || ',' || %s, ',')",
        "swap": "(CASE WHEN instr(',' || {col} || ',', %s) > 0 THEN trim(replace(',' || {col} || ',', %s, %s), ',') END)",
    },
}


def supported(vendor: str) -> bool:
    return vendor in _SPELLINGS


class TextEdit(Func):
    """One list's text with one item appended (`old` None), replaced (`new` a text) or removed (`new` None)."""

    output_field = TextField()

    def __init__(self, column: str, *, old: str | None, new: str | None) -> None:
        super().__init__(F(column))
        if old is None and new is None:
            raise ValueError("a text edit appends, replaces or removes an item")
        self.old, self.new = old, new

    @property
    def kind(self) -> Literal["append", "swap"]:
        return "append" if self.old is None else "swap"

    def shape(self) -> tuple[Any, ...] | None:
        """What the SQL text depends on, for a statement reused with new values (tickets.write_batch)."""
        column = self.source_expressions[0]
        if not isinstance(column, F) or "__" in column.name:
            return None
        return ("text", column.name, self.kind)

    def values(self, vendor: str) -> list[Any]:
        """The parameters as_sql sends, in its order."""
        if self.old is None:
            return [self.new]
        found = f",{self.old},"
        return [found, found, f",{self.new}," if self.new is not None else ","]

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.source_expressions[0])
        if params:
            raise ValueError("a text edit reads one column")
        template = _SPELLINGS[connection.vendor][self.kind]
        return template.format(col=column), self.values(connection.vendor)


def served_columns(document: dict[str, Any]) -> dict[str, Any]:
    """The state row's texts of an agent-facing document (in its key order), written in full: column -> value.
    Its actions' texts are not among them: they are kept on the actions' rows (StateAction)."""
    texts = list_texts(document)
    return {
        "served_version": document["version"],
        **{column: texts[name] for name, column in SERVED_COLUMNS.items()},
        SERVED_TAIL: tail_text(document),
    }


class TailTotal(Func):
    """SQL: one money total as the row's served texts have it (`prefix` reaches the state through a relation),
    NULL when they are not of its version: a queue row reads one number, not its state."""

    output_field = IntegerField()

    def __init__(self, name: str, prefix: str = "") -> None:
        if name not in MONEY_TOTALS:
            raise ValueError(f"no money total {name!r}")
        super().__init__(F(f"{prefix}{SERVED_TAIL}"), F(f"{prefix}served_version"), F(f"{prefix}version"))
        self.name = name

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        tail, served, version = (compiler.compile(e)[0] for e in self.source_expressions)
        if connection.vendor == "postgresql":
            total = f"((('{{' || {tail} || '}}')::jsonb ->> '{self.name}')::integer)"
        else:
            total = f"CAST(json_extract('{{' || {tail} || '}}', '$.{self.name}') AS integer)"
        return f"(CASE WHEN {served} = {version} AND {tail} IS NOT NULL THEN {total} END)", []


class ActionTextCache:
    """The joined served texts of the actions of the states this process served last, by ticket, with the version
    they are of: a read passes the version it holds (`held`), and the database joins the texts again only for a
    state of another version (JoinedActionTexts' `unless`). A state's actions change only with its version, so a
    copy of the same version is the same text. Bounded by the characters it keeps (least recently used out)."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._entries: OrderedDict[tuple[str, str, bool], tuple[int, int, str]] = OrderedDict()
        self._chars = 0

    def held(self, key: tuple[str, str, bool]) -> tuple[int, int]:
        """The state and version this process holds the texts of for the key (database alias, ticket id, the
        model's texts or the agent's), or (0, 0): no state nor version is 0."""
        found = self._entries.get(key)
        return (0, 0) if found is None else (found[0], found[1])

    def resolve(self, key: tuple[str, str, bool], state: int, version: int, joined: str | None) -> str | None:
        """The texts of the state at `version`: as the read joined them (kept), or, when it did not (NULL: the
        copy held is current), the copy; None when that copy went meanwhile (another thread of the process
        evicted it): the caller reads the state its slower way."""
        if joined is None:
            found = self._entries.get(key)
            if found is None or found[:2] != (state, version):
                return None
            self._entries.move_to_end(key)
            return found[2]
        self._put(key, (state, version, joined))
        return joined

    def clear(self) -> None:
        self._entries.clear()
        self._chars = 0

    def _put(self, key: tuple[str, str, bool], entry: tuple[int, int, str]) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._chars -= len(old[2])
        if len(entry[2]) > self.max_chars:
            return
        self._entries[key] = entry
        self._chars += len(entry[2])
        while self._chars > self.max_chars:
            _, dropped = self._entries.popitem(last=False)
            self._chars -= len(dropped[2])


# This process's copy, shared by the state and context reads (a sync worker serves one request at a time).
ACTION_TEXTS = ActionTextCache(max_chars=settings.SUNDRY_ACTION_TEXT_CACHE_CHARS)
