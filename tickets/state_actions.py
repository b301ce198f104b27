"""The actions of a pinned state that one action's write can touch, read from their rows (tickets.models.StateAction)
without the others: those that may hold the same item as the new action (they share one of its item keys, or
name no item), the open intents (the ticket's oldest one is kept on the ticket) and any named by number.

Plain SQL on purpose: the query runs on every action and settle with a list of keys of varying length, and
Django would build and compile it anew each time. Portable (PostgreSQL and SQLite); values are parameters.
"""

from __future__ import annotations

import json

from django.db import connections

from core.identity import WHOLE_ORDER_KEYS
from core.state import ActionItem, StateItems
from tickets.models import PinnedState, StateAction, StateActionKey
from tickets.prepared import prepared_cursor

_ACTIONS = StateAction._meta.db_table
_KEYS = StateActionKey._meta.db_table


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


def action_number(action_id: str) -> int | None:
    """The number of an action id as the desk writes them (A1, A2, ...), else None."""
    digits = action_id[1:]
    if action_id[:1] != "A" or not digits.isascii() or not digits.isdigit() or len(digits) > 9:
        return None
    return int(digits) if digits == str(int(digits)) else None


def touched_actions(
    pinned: PinnedState, *, keys: list[str] | None, numbers: tuple[int, ...] = ()
) -> list[tuple[int, int, str]]:
    """(row id, number, stored JSON text) of the state's actions a write can touch, in order: those with one of
    `keys` or the whole order's key (None: every action), the open intents, and those numbered."""
    state = pinned.pk
    if keys is None:
        sql = f"SELECT a.id, a.number, a.data FROM {_ACTIONS} a WHERE a.state_id = %s ORDER BY a.number"
        params: list[int | str] = [state]
    else:
        # Each part found by its own index (an OR of them would read every action of the state).
        parts = [f"SELECT o.number FROM {_ACTIONS} o WHERE o.state_id = %s AND o.open_intent"]
        params = [state, state]
        if keys:
            wanted = sorted({*keys, *WHOLE_ORDER_KEYS})
            parts.append(
                f"SELECT k.number FROM {_KEYS} k WHERE k.state_id = %s AND k.key IN ({_marks(len(wanted))})"
            )
            params += [state, *wanted]
        if numbers:
            parts += ["SELECT %s"] * len(numbers)
            params += list(numbers)
        sql = (
            f"SELECT a.id, a.number, a.data FROM {_ACTIONS} a WHERE a.state_id = %s "
            f"AND a.number IN ({' UNION '.join(parts)}) ORDER BY a.number"
        )
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
