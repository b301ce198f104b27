"""A queue of up to 1,000,000 tickets whose rows look real, built in SQL with generate_series (minutes, not hours).

Every ticket has a pinned state with items (an action, a constraint, an open question, a decision) as the desk
keeps them (the action a row of its own with its item key, the state's served texts current), two turns,
and one ticket in ten a compaction event (one in five of those failed, the others applied with one missing item in
three). Columns the fill does not name get their model field's default (or now() for auto timestamps, NULL when
nullable), read from the Django models, so a column added later does not break the fill; a column with neither
stops it with its name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, models

from compaction.models import CompactionEvent
from compaction.queue_figures import ticket_figures_refresh
from core.identity import action_keys
from core.state import (
    STORED_DATA_FIELDS,
    ActionItem,
    StateItems,
    agent_item,
    agent_state,
    stored_open_intent,
)
from core.state_text import action_texts, item_text, tail_text
from core.tokens import state_tokens
from tickets.models import (
    SERVED_COLUMNS,
    SERVED_TAIL,
    PinnedState,
    StateAction,
    StateActionKey,
    Ticket,
    TicketClass,
    Turn,
)

Log = Callable[[str], None]
BATCH = 250_000


Expr = str | tuple[str, Sequence[Any]]  # SQL text, or SQL text with its own parameters


def insert_select(
    model: type[models.Model], values: Mapping[str, Expr], source: str, params: Sequence[Any] = ()
) -> tuple[str, list[Any]]:
    """`INSERT INTO <table> (<columns>) SELECT <exprs> <source>`: `values` maps columns to SQL expressions over
    `source` (with their parameters when they have some); every other concrete column gets its field's
    default as a parameter. The parameters come in the statement's order: the columns', then the source's."""
    columns: list[str] = []
    exprs: list[str] = []
    ordered: list[Any] = []
    for f in model._meta.concrete_fields:
        if f.primary_key:
            continue
        column = str(f.column)
        columns.append(column)
        if column in values:
            given = values[column]
            text, own = (given, ()) if isinstance(given, str) else given
            exprs.append(text)
            ordered.extend(own)
        elif getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            exprs.append("now()")
        elif f.has_default():
            exprs.append("%s")
            ordered.append(f.get_db_prep_save(f.get_default(), connection))
        elif f.null:
            exprs.append("NULL")
        elif f.empty_strings_allowed and isinstance(f, (models.CharField, models.TextField)):
            exprs.append("''")
        else:
            raise RuntimeError(f"queue fill: {model.__name__}.{f.name} has no default; give it a value")
    unknown = set(values) - set(columns)
    if unknown:
        raise RuntimeError(f"queue fill: {model.__name__} has no column {sorted(unknown)}")
    sql = f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) SELECT {', '.join(exprs)} {source}"
    return sql, [*ordered, *params]


# Every queue ticket's pinned state: three text items and one action, the same refund of the same item (so its
# served texts, item key and money figures are computed once, below); the action's order and idempotency key are
# the ticket's own, spliced into its texts by SQL where these markers stand.
ORDER_MARK, KEY_MARK = "@order@", "@key@"
TEXT_ITEMS: dict[str, Any] = {
    "customer_constraints": [
        {"id": "C1", "at_turn": 1, "text": "No calls before 10am", "source": "customer_turn"}
    ],
    "open_questions": [
        {"id": "Q1", "at_turn": 2, "text": "Was the parcel left with a neighbour?", "source": "customer_turn"}
    ],
    "decisions": [
        {
            "id": "D1",
            "at_turn": 2,
            "text": "Refund the damaged item once the photo arrives",
            "source": "agent_inference",
        }
    ],
    "questions_opened": 1,
}
ACTION = {
    "id": "A1",
    "at_turn": 1,
    "tool": "issue_refund",
    "item": "item-1",
    "amount_cents": 2500,
    "args": {"order": ORDER_MARK},
    "idempotency_key": KEY_MARK,
}
STATE_VERSION = 5


@dataclass(frozen=True)
class StateTemplate:
    """The columns of a queue ticket's state, its action row and its key rows, as SQL over `t` (the ticket)."""

    state: dict[str, Expr]
    action: dict[str, Expr]
    keys: list[str]
    tokens: int


def state_template(klass: TicketClass) -> StateTemplate:
    """What the desk would have written had the action and the items been recorded through it, with the ticket
    class's tool catalog: the action stored as a validated ActionItem dumps it, its two served texts, its item
    keys, the state's action count and figures, the state's served texts of this version and its tokens (counted
    for one ticket: the others differ only in the digits of their ids)."""
    stored = ActionItem.model_validate(ACTION).model_dump(mode="json")
    served, served_model = action_texts(stored)
    items = StateItems.load(TEXT_ITEMS, tools=klass.tool_catalog, actions=[stored])
    first = dict(stored, args={"order": "SU-0000000"}, idempotency_key="q-1")
    document = agent_state(
        ticket="Q-0000000",
        order="SU-0000000",
        seller_type="first_party",
        version=STATE_VERSION,
        items=StateItems.load(TEXT_ITEMS, tools=klass.tool_catalog, actions=[first]),
    )
    tokens = state_tokens(document, klass.encoding)
    state: dict[str, Expr] = {
        "version": str(STATE_VERSION),
        "data": ("%s::jsonb", [json.dumps({name: TEXT_ITEMS[name] for name in STORED_DATA_FIELDS})]),
        "tokens": str(tokens),
        "action_count": "1",
        "action_figures": ("%s::jsonb", [json.dumps(items.figures.as_json())]),
        "served_version": str(STATE_VERSION),
        SERVED_TAIL: ("%s", [tail_text(items.totals())]),
    }
    for name, column in SERVED_COLUMNS.items():
        text = ",".join(
            item_text(name, agent_item(name, item.model_dump(mode="json"))) for item in getattr(items, name)
        )
        state[column] = ("%s", [text])
    action: dict[str, Expr] = {
        "number": "1",
        "data": _spliced(json.dumps(stored), "::jsonb"),
        "served": _spliced(served),
        "served_model": _spliced(served_model),
        "open_intent": "true" if stored_open_intent(stored) else "false",
    }
    keys = action_keys(stored["item"], stored["args"])
    return StateTemplate(state=state, action=action, keys=keys, tokens=tokens)


def _spliced(text: str, cast: str = "") -> Expr:
    """`text` as SQL, each marker in it replaced by the ticket's value (text that JSON writes as it is)."""
    values = {ORDER_MARK: "t.order_id", KEY_MARK: "'q-' || t.id"}
    parts = re.split(f"({'|'.join(map(re.escape, values))})", text)
    sql = [values.get(part, "%s") for part in parts]
    literals = [part for part in parts if part not in values]
    return f"({' || '.join(sql)}){cast}", literals


def fill_queue(total: int, log: Log) -> None:
    """Queue tickets (`Q-...`) up to `total` of them, in batches of BATCH, then ANALYZE.

    The bench's other tickets are not counted: they are the oldest (lowest ids), so the queue's last page shows
    them at every size and its first 20 pages show queue tickets only, at 1,000 as at 1,000,000."""
    klass, _ = TicketClass.objects.get_or_create(
        slug="bench-queue", defaults={"token_budget": 8000, "compaction_threshold": 0.8}
    )
    template = state_template(klass)
    start = Ticket.objects.filter(ticket_id__startswith="Q-").count()
    for first in range(start, total, BATCH):
        last = min(first + BATCH, total) - 1
        _fill_batch(klass.pk, template, first, last)
        log(f"  {last + 1:,}/{total:,} tickets")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # fresh planner statistics, as autovacuum would give a real queue


def _fill_batch(klass_pk: int, template: StateTemplate, first: int, last: int) -> None:
    tickets_sql, tickets_params = insert_select(
        Ticket,
        {
            "ticket_id": "'Q-' || lpad(g.n::text, 7, '0')",
            "order_id": "'SU-' || lpad(g.n::text, 7, '0')",
            "seller_type": "CASE WHEN g.n %% 3 = 0 THEN 'first_party' ELSE 'marketplace' END",
            "ticket_class_id": ("%s", [klass_pk]),
            "system_prompt": "'You are Sundry''s support agent.'",
            "system_prompt_tokens": "9",
            "context_tokens": "(g.n::bigint * 7919) %% 9000",
            "turn_count": "2",
            "created_at": "now() - make_interval(secs => g.n)",
        },
        "FROM generate_series(%s, %s) AS g(n)",
        [first, last],
    )
    in_batch = (
        "FROM tickets_ticket t WHERE t.ticket_id >= %s AND t.ticket_id <= %s AND t.ticket_id LIKE 'Q-%%'"
    )
    bounds = [f"Q-{first:07d}", f"Q-{last:07d}"]
    state_sql, state_params = insert_select(
        PinnedState, {"ticket_id": "t.id", **template.state}, in_batch, bounds
    )
    with_state = in_batch.replace(
        "FROM tickets_ticket t", "FROM tickets_ticket t JOIN tickets_pinnedstate p ON p.ticket_id = t.id"
    )
    action_sql, action_params = insert_select(
        StateAction, {"state_id": "p.id", **template.action}, with_state, bounds
    )
    key_sql, key_params = insert_select(
        StateActionKey,
        {"state_id": "p.id", "number": "1", "key": "k.key"},
        with_state.replace(" WHERE ", " CROSS JOIN unnest(%s::text[]) AS k(key) WHERE "),
        [template.keys, *bounds],
    )
    turn_sql, turn_params = insert_select(
        Turn,
        {
            "ticket_id": "t.id",
            "number": "k.k",
            "role": "CASE WHEN k.k = 1 THEN 'customer' ELSE 'agent' END",
            "content": "CASE WHEN k.k = 1 THEN 'My parcel arrived damaged, order ' || t.order_id "
            "ELSE 'Sorry to hear that. Could you send a photo of the damage?' END",
            "tokens": "14",
            "context_tokens": f"{template.tokens} + 14 * k.k",
        },
        in_batch.replace(
            "FROM tickets_ticket t", "FROM tickets_ticket t CROSS JOIN generate_series(1, 2) AS k(k)"
        ),
        bounds,
    )
    summary = json.dumps({"narrative": "The buyer reported damage; a refund followed.", "decisions": []})
    event_sql, event_params = insert_select(
        CompactionEvent,
        {
            "ticket_id": "t.id",
            "number": "1",
            "at_turn": "2",
            "upto_turn": "1",
            "status": "CASE WHEN t.id %% 50 = 0 THEN 'failed' ELSE 'applied' END",
            "first_replaced_turn": "1",
            "last_replaced_turn": "1",
            "tokens_before": "7000",
            "tokens_after": "1000",
            "threshold_tokens": "6400",
            "token_budget": "8000",
            "attempts": "1",
            "summary": ("CASE WHEN t.id %% 50 = 0 THEN NULL ELSE %s::jsonb END", [summary]),
            "summary_tokens": "40",
            "coverage_missing_count": "CASE WHEN t.id %% 30 = 0 THEN 1 ELSE 0 END",
        },
        in_batch + " AND t.id %% 10 = 0",
        bounds,
    )
    with connection.cursor() as cursor:
        cursor.execute(tickets_sql, tickets_params)
        cursor.execute(state_sql, state_params)
        cursor.execute(action_sql, action_params)
        cursor.execute(key_sql, key_params)
        cursor.execute(turn_sql, turn_params)
        cursor.execute(event_sql, event_params)
    # The queue's stored figures (compaction count, flags) from the events just inserted, as the services keep them.
    ticket_figures_refresh(
        tickets=Ticket.objects.filter(
            ticket_id__gte=bounds[0], ticket_id__lte=bounds[1], ticket_id__startswith="Q-"
        )
    )
