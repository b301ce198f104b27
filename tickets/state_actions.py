"""The actions of a pinned state that one action's write can touch, read from their rows (tickets.models.StateAction)
without the others: those that may hold the same item as the new action (they share one of its item keys, or
name no item), the open intents (the ticket's oldest one is kept on the ticket) and any named by number.

Plain SQL on purpose (tickets.action_rows_sql): the query runs on every action and settle with a list of keys of
varying length, and Django would build and compile it anew each time.
"""

from __future__ import annotations

import json

from django.db import connections

from core.state import ActionItem, StateItems
from tickets.action_rows_sql import touched_sql
from tickets.models import PinnedState
from tickets.prepared import prepared_cursor


def touched_actions(
    pinned: PinnedState, *, keys: list[str] | None, numbers: tuple[int, ...] = ()
) -> list[tuple[int, int, str]]:
    """(row id, number, stored JSON text) of the state's actions a write can touch, in order: those with one of
    `keys` or the whole order's key (None: every action), the open intents, and those numbered
    (tickets.action_rows_sql)."""
    sql, params = touched_sql(pinned.pk, keys=keys, numbers=numbers)
    with prepared_cursor(connections[pinned._state.db or "default"]) as cursor:
        cursor.execute(sql, params)
        # Django has PostgreSQL hand jsonb over as text (JSONField parses it); a driver that parses it anyway
        # gets it written back.
        return [
            (pk, number, data if isinstance(data, str) else json.dumps(data)) for pk, number, data in cursor
        ]


def keep_touched_items(pinned: PinnedState, *, keys: list[str] | None, numbers: tuple[int, ...] = ()) -> None:
    """The locked row's items for one write (`PinnedState.keep_items`): its text items, validated from the data it
    was read with (as JSON text, `data_text`, when the read cast it so), and of its actions only those the write
    can touch (`touched_actions`), with the count and figures of all: not the others, however many there are."""
    rows = touched_actions(pinned, keys=keys, numbers=numbers)
    pinned.__dict__["_action_pks"] = {number: pk for pk, number, _ in rows}
    stored = pinned.__dict__.get("data_text")
    items = StateItems.load_partial(
        stored if stored is not None else pinned.data,
        tools=pinned.ticket.ticket_class.tool_catalog,
        actions=[ActionItem.model_validate_json(text) for _, _, text in rows],
        action_count=pinned.action_count,
        figures=pinned.action_figures,
    )
    pinned.keep_items(items)
