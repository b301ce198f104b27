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
from typing import Any

from django.db.models import QuerySet

from compaction.models import CompactionEvent
from core.cost import WORKING_ROLES, Prices, TicketCost, ticket_cost
from core.vocabulary import CompactionStatus
from tickets.models import Turn

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
