"""What compaction cost and saved, read from the database for the pages: per ticket and per class.

The arithmetic is `core.cost`'s (the eval's `cost` object uses the same): per replacing compaction, the
summarizer's recorded cost; the tokens each later working request (an agent message or a tool call) no
longer re-sends, at the class's working input price; and the ratio of one compaction to one working turn.
Two queries, flat in the number of compactions: the replacing events, then the working turns of their tickets
(number, role and tokens; `core.cost.ticket_cost` counts the later ones by bisection). Counting them in SQL
per event read a 50,000-turn ticket's turns once per compaction (148 s for 7,000 compactions in `make bench`).
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from compaction.models import CompactionEvent
from core.cost import (
    MILLION,
    WORKING_ROLES,
    CostSummary,
    Prices,
    TicketCost,
    rounded_ratio,
    ticket_cost,
)
from core.vocabulary import CompactionStatus
from tickets.models import Ticket, Turn

CLASS = "ticket__ticket_class__"
EVENT_FIELDS = (
    "number",
    "at_turn",
    "tokens_before",
    "tokens_after",
    "summarizer_input_tokens",
    "summarizer_output_tokens",
    "latency_ms",
    "cost_usd",
)


def costs_by_class(events: QuerySet[CompactionEvent]) -> dict[str, TicketCost]:
    """The replacing compactions among `events`, grouped by their ticket's class (its prices)."""
    replacing = events.filter(status__in=CompactionStatus.replacing())
    rows = list(
        replacing.order_by(f"{CLASS}slug", "ticket_id", "number").values(
            *EVENT_FIELDS,
            "ticket_id",
            f"{CLASS}slug",
            f"{CLASS}working_input_price",
            f"{CLASS}working_output_price",
        )
    )
    by_ticket: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_ticket[row["ticket_id"]].append(row)
    turns: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    # The working turns (agent replies among them) of the same events' tickets, as a subquery: always the
    # second query, with or without compactions.
    tickets = replacing.order_by().values("ticket_id")
    working = Turn.objects.filter(ticket_id__in=tickets, role__in=WORKING_ROLES)
    for ticket_id, number, role, tokens in working.order_by().values_list(
        "ticket_id", "number", "role", "tokens"
    ):
        turns[ticket_id].append((number, role, tokens))
    out: dict[str, TicketCost] = {}
    for ticket_id, mine in by_ticket.items():
        first = mine[0]
        slug = first[f"{CLASS}slug"]
        if slug not in out:
            prices = Prices(first[f"{CLASS}working_input_price"], first[f"{CLASS}working_output_price"])
            out[slug] = TicketCost(prices=prices)
        cost = ticket_cost(events=mine, turns=turns[ticket_id], prices=out[slug].prices)
        out[slug].compactions.extend(cost.compactions)
    return out


def _quoted(model: Any, *names: str) -> dict[str, str]:
    """A model's table and the named fields' columns, quoted for this database."""
    quote = connection.ops.quote_name
    columns = {f.name: str(f.column) for f in model._meta.concrete_fields}
    return {name: quote(columns[name]) for name in names} | {"table": quote(model._meta.db_table)}


def ticket_savings(ticket: Ticket) -> CostSummary | None:
    """What one ticket's replacing compactions saved, as `summary_of(costs_by_class(...))` sums it, in one
    aggregate query: no row per compaction or per turn comes back. None before any compaction replaced turns.

    The working requests after each compaction are counted by one running count over the ticket's working
    turns and its compactions in turn order (a turn at a compaction's own turn is not after it, as
    `ticket_cost`'s bisection has it). The database still reads every working turn of the ticket (about 50 ms
    at 50,000 turns): the ticket page asks for this on its own request past `SAVINGS_INLINE_TURNS`.
    """
    e = _quoted(CompactionEvent, "ticket", "status", "at_turn", "tokens_before", "tokens_after", "cost_usd")
    t = _quoted(Turn, "ticket", "number", "role", "tokens")
    prices = ticket.ticket_class
    replacing = list(CompactionStatus.replacing())
    working = list(WORKING_ROLES)
    in_list = ", ".join(["%s"] * len(replacing))
    roles = ", ".join(["%s"] * len(working))
    # tokens_after of None or 0 counts as nothing saved (`compaction_cost` reads `tokens_after or before`).
    after = f"COALESCE(NULLIF({e['tokens_after']}, 0), {e['tokens_before']})"
    sql = f"""
        WITH working AS MATERIALIZED (
            SELECT {t["number"]} AS at, {t["role"]} AS role, {t["tokens"]} AS tokens FROM {t["table"]}
            WHERE {t["ticket"]} = %s AND {t["role"]} IN ({roles})
        ), events AS MATERIALIZED (
            SELECT {e["at_turn"]} AS at,
                CASE WHEN {e["tokens_before"]} > {after} THEN {e["tokens_before"]} - {after} ELSE 0 END AS saved,
                {e["tokens_before"]} AS before, {e["cost_usd"]} AS cost
            FROM {e["table"]} WHERE {e["ticket"]} = %s AND {e["status"]} IN ({in_list})
        ), reply AS (
            SELECT COALESCE(AVG(tokens), 0) AS tokens FROM working WHERE role = %s
        ), merged AS (
            SELECT at, 1 AS turn, 0 AS saved FROM working UNION ALL SELECT at, 0, saved FROM events
        ), counted AS (
            SELECT turn, saved, SUM(turn) OVER (ORDER BY at, turn DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS upto
            FROM merged
        )
        SELECT
            (SELECT COUNT(*) FROM events),
            (SELECT COALESCE(SUM(cost), 0) FROM events),
            (SELECT COALESCE(SUM(saved * ((SELECT COUNT(*) FROM working) - upto)), 0)
                FROM counted WHERE turn = 0),
            (SELECT AVG(ROUND(cost / NULLIF((before * %s + reply.tokens * %s) / %s, 0), 4))
                FROM events, reply)
    """
    params: list[int | str | Decimal] = [
        ticket.pk,
        *working,
        ticket.pk,
        *replacing,
        "agent",
        prices.working_input_price,
        prices.working_output_price,
        MILLION,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        count, cost, not_resent, ratio = cursor.fetchone()
    if not count:
        return None
    return CostSummary(
        compactions=int(count),
        cost_usd=Decimal(str(cost)),
        tokens_not_resent=int(not_resent),
        savings_usd=Decimal(int(not_resent)) * prices.working_input_price / MILLION,
        compaction_to_turn_ratio=None if ratio is None else rounded_ratio(Decimal(ratio)),
    )
