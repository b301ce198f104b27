"""The statement that reads the actions one write can touch, as plain SQL text with its parameters: no Django
in it, so that the desk (tickets.state_actions) and the bench's raw baseline (bench/raw_writes.py) send the
same statement. Portable (PostgreSQL and SQLite); values are parameters.

Each part is found by its own index, then the rows by the (state, number) index: an OR of the parts in one
WHERE would have the database read every action of the state.
"""

from __future__ import annotations

from core.identity import WHOLE_ORDER_KEYS

# The tables of tickets.models.StateAction and StateActionKey (a test holds them equal).
ACTIONS_TABLE = "tickets_stateaction"
KEYS_TABLE = "tickets_stateactionkey"


def action_number(action_id: str) -> int | None:
    """The number of an action id as the desk writes them (A1, A2, ...), else None."""
    digits = action_id[1:]
    if action_id[:1] != "A" or not digits.isascii() or not digits.isdigit() or len(digits) > 9:
        return None
    return int(digits) if digits == str(int(digits)) else None


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


def touched_sql(
    state: int, *, keys: list[str] | None, numbers: tuple[int, ...] = ()
) -> tuple[str, list[int | str]]:
    """SELECT (row id, number, stored JSON) of the state's actions a write can touch, in order: those with one of
    `keys` or the whole order's key (None: every action), the open intents, and those numbered."""
    if keys is None:
        sql = f"SELECT a.id, a.number, a.data FROM {ACTIONS_TABLE} a WHERE a.state_id = %s ORDER BY a.number"
        return sql, [state]
    parts = [f"SELECT o.number FROM {ACTIONS_TABLE} o WHERE o.state_id = %s AND o.open_intent"]
    params: list[int | str] = [state, state]
    if keys:
        wanted = sorted({*keys, *WHOLE_ORDER_KEYS})
        parts.append(
            f"SELECT k.number FROM {KEYS_TABLE} k WHERE k.state_id = %s AND k.key IN ({_marks(len(wanted))})"
        )
        params += [state, *wanted]
    if numbers:
        parts += ["SELECT %s"] * len(numbers)
        params += list(numbers)
    sql = (
        f"SELECT a.id, a.number, a.data FROM {ACTIONS_TABLE} a WHERE a.state_id = %s "
        f"AND a.number IN ({' UNION '.join(parts)}) ORDER BY a.number"
    )
    return sql, params
