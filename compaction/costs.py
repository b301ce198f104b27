"""What compaction cost and saved, read from the database for the pages: per ticket and per class.

The arithmetic is `core.cost`'s (the eval's `cost` object uses the same): per replacing compaction, the
summarizer's recorded cost; the tokens each later working request (an agent message or a tool call) no
longer re-sends, at the class's working input price; and the ratio of one compaction to one working turn.
One query: the working requests after each compaction and the ticket's agent replies are subqueries.
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from compaction.models import CompactionEvent
from core.cost import WORKING_ROLES, Prices, TicketCost, compaction_cost
from core.vocabulary import CompactionStatus, TurnRole
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


def _count(turns: QuerySet[Turn]) -> Subquery:
    return Subquery(turns.order_by().values("ticket").annotate(n=Count("pk")).values("n"), IntegerField())


def costs_by_class(events: QuerySet[CompactionEvent]) -> dict[str, TicketCost]:
    """The replacing compactions among `events`, grouped by their ticket's class (its prices)."""
    later = Turn.objects.filter(
        ticket=OuterRef("ticket"), number__gt=OuterRef("at_turn"), role__in=WORKING_ROLES
    )
    replies = Turn.objects.filter(ticket=OuterRef("ticket"), role=TurnRole.AGENT)
    rows = (
        events.filter(status__in=CompactionStatus.replacing())
        .annotate(
            later=Coalesce(_count(later), Value(0)),
            reply_count=Coalesce(_count(replies), Value(0)),
            reply_sum=Coalesce(
                Subquery(
                    replies.order_by().values("ticket").annotate(s=Sum("tokens")).values("s"),
                    IntegerField(),
                ),
                Value(0),
            ),
        )
        .order_by(f"{CLASS}slug", "ticket_id", "number")
        .values(
            *EVENT_FIELDS,
            "later",
            "reply_count",
            "reply_sum",
            f"{CLASS}slug",
            f"{CLASS}working_input_price",
            f"{CLASS}working_output_price",
        )
    )
    out: dict[str, TicketCost] = {}
    for row in rows:
        slug = row[f"{CLASS}slug"]
        if slug not in out:
            prices = Prices(row[f"{CLASS}working_input_price"], row[f"{CLASS}working_output_price"])
            out[slug] = TicketCost(prices=prices)
        reply_tokens = Decimal(row["reply_sum"]) / row["reply_count"] if row["reply_count"] else Decimal(0)
        out[slug].compactions.append(
            compaction_cost(
                row,
                later_working_requests=row["later"],
                reply_tokens=reply_tokens,
                prices=out[slug].prices,
            )
        )
    return out
