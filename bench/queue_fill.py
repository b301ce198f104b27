"""A queue of up to 1,000,000 tickets whose rows look real, built in SQL with generate_series (minutes, not hours).

Every ticket has a pinned state with items (an action, a constraint, an open question, a decision), two turns,
and one ticket in ten a compaction event (one in five of those failed, the others applied with one missing item in
three). Columns the fill does not name get their model field's default (or now() for auto timestamps, NULL when
nullable), read from the Django models, so a column added later does not break the fill; a column with neither
stops it with its name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import connection, models

from compaction.models import CompactionEvent
from compaction.queue_figures import ticket_figures_refresh
from tickets.models import PinnedState, Ticket, TicketClass, Turn

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


STATE_DATA = """jsonb_build_object(
  'actions_taken', jsonb_build_array(jsonb_build_object('id', 'A1', 'at_turn', 1, 'source', NULL,
    'tool', 'issue_refund', 'item', 'item-' || t.id, 'amount_cents', 1000 + t.id %% 5000, 'reversible', false,
    'args', jsonb_build_object('order', t.order_id), 'idempotency_key', 'q-' || t.id, 'recorded_by', 'agent',
    'repeat_of', NULL, 'reason', '', 'reversed', false, 'reversed_reason', '', 'status', 'succeeded',
    'failure_reason', '', 'intended_at', NULL, 'recorded_by_user_id', NULL)),
  'customer_constraints', jsonb_build_array(jsonb_build_object('id', 'C1', 'at_turn', 1,
    'text', 'No calls before 10am', 'source', 'customer_turn')),
  'open_questions', jsonb_build_array(jsonb_build_object('id', 'Q1', 'at_turn', 2,
    'text', 'Was the parcel left with a neighbour?', 'source', 'customer_turn')),
  'decisions', jsonb_build_array(jsonb_build_object('id', 'D1', 'at_turn', 2,
    'text', 'Refund the damaged item once the photo arrives', 'source', 'agent_inference')))"""


def fill_queue(total: int, log: Log) -> None:
    """Queue tickets (`Q-...`) up to `total` of them, in batches of BATCH, then ANALYZE.

    The bench's other tickets are not counted: they are the oldest (lowest ids), so the queue's last page shows
    them at every size and its first 20 pages show queue tickets only, at 1,000 as at 1,000,000."""
    klass, _ = TicketClass.objects.get_or_create(
        slug="bench-queue", defaults={"token_budget": 8000, "compaction_threshold": 0.8}
    )
    start = Ticket.objects.filter(ticket_id__startswith="Q-").count()
    for first in range(start, total, BATCH):
        last = min(first + BATCH, total) - 1
        _fill_batch(klass.pk, first, last)
        log(f"  {last + 1:,}/{total:,} tickets")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # fresh planner statistics, as autovacuum would give a real queue


def _fill_batch(klass_pk: int, first: int, last: int) -> None:
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
        PinnedState,
        {"ticket_id": "t.id", "version": "5", "data": STATE_DATA, "tokens": "180"},
        in_batch,
        bounds,
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
            "context_tokens": "180 + 14 * k.k",
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
        cursor.execute(turn_sql, turn_params)
        cursor.execute(event_sql, event_params)
    # The queue's stored figures (compaction count, flags) from the events just inserted, as the services keep them.
    ticket_figures_refresh(
        tickets=Ticket.objects.filter(
            ticket_id__gte=bounds[0], ticket_id__lte=bounds[1], ticket_id__startswith="Q-"
        )
    )
