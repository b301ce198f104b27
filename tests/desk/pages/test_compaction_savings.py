"""What compaction cost and saved, on the ticket page's cost card and the metrics page's per-class rows:
the figures `core.cost` computes (the eval's `cost` object uses the same), read from the database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from compaction.costs import costs_by_class, ticket_savings
from compaction.models import CompactionEvent
from core.cost import summary_of
from desk.pages.formatting import usd
from desk.pages.ticket import SAVINGS_INLINE_TURNS, get_ticket
from tests.factories import import_t40118, long_ticket
from tickets.models import Turn

pytestmark = pytest.mark.django_db


def expected(ticket, cost_usd: Decimal) -> tuple[int, Decimal, float]:
    """Tokens not re-sent, their price and the compaction/turn ratio, worked out here by hand."""
    [event] = CompactionEvent.objects.filter(ticket=ticket, status="applied")
    later = Turn.objects.filter(
        ticket=ticket, number__gt=event.at_turn, role__in=("agent", "tool_call")
    ).count()
    replies = list(Turn.objects.filter(ticket=ticket, role="agent").values_list("tokens", flat=True))
    not_resent = (event.tokens_before - event.tokens_after) * later
    working_turn = (
        Decimal(event.tokens_before) * Decimal("2.00")
        + Decimal(sum(replies)) / len(replies) * Decimal("8.00")
    ) / Decimal(1_000_000)
    return (
        not_resent,
        Decimal(not_resent) * Decimal("2.00") / Decimal(1_000_000),
        round(float(cost_usd / working_turn), 4),
    )


def test_the_cost_card_shows_what_the_compaction_saved_and_its_ratio_to_a_turn(
    sam: Client, scenario: dict
) -> None:
    ticket = import_t40118(scenario)
    CompactionEvent.objects.filter(ticket=ticket, status="applied").update(cost_usd=Decimal("0.000900"))
    not_resent, savings, ratio = expected(ticket, Decimal("0.000900"))
    assert not_resent > 0 and 0 < ratio < 1
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    card = html[html.index('id="card-cost"') :]
    card = card[: card.index("</div>")]
    assert f"saves {usd(savings)} · {not_resent} tokens not re-sent · compaction/turn {ratio:.4f}" in card


def test_a_ticket_before_any_compaction_shows_no_savings(sam: Client, scenario: dict) -> None:
    ticket = import_t40118(scenario, until=4)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    assert 'id="card-cost"' in html and "tokens not re-sent" not in html


def test_the_metrics_row_of_the_class_carries_the_same_figures(sam: Client, scenario: dict) -> None:
    ticket = import_t40118(scenario)
    CompactionEvent.objects.filter(ticket=ticket, status="applied").update(cost_usd=Decimal("0.000900"))
    not_resent, savings, ratio = expected(ticket, Decimal("0.000900"))
    html = sam.get("/metrics/").content.decode()
    row = html[html.index("<td>standard-8k</td>") :]
    row = row[: row.index("</tr>")]
    assert f'<td class="num">{not_resent}</td><td class="num">{usd(savings)}</td>' in row
    assert f'<td class="num ratio">{ratio:.4f}</td>' in row


def test_deferred_and_failed_compactions_save_nothing_and_classes_stay_apart(scenario: dict) -> None:
    ticket = import_t40118(scenario)
    assert CompactionEvent.objects.filter(ticket=ticket, status="deferred").exists()
    costs = costs_by_class(CompactionEvent.objects.all())
    assert list(costs) == ["standard-8k"]
    [cost] = costs.values()
    assert [c.number for c in cost.compactions] == list(
        CompactionEvent.objects.filter(ticket=ticket, status="applied").values_list("number", flat=True)
    )
    summary = summary_of(cost.compactions, cost.prices)
    assert summary.cost_usd == 0 and summary.compaction_to_turn_ratio == 0.0  # the extractive one is free
    assert summary.net_savings_usd == summary.savings_usd > 0


def test_one_aggregate_query_sums_what_costs_by_class_does(
    scenario: dict, django_assert_num_queries: Any
) -> None:
    """`ticket_savings` (one query, no row per compaction) and `summary_of(costs_by_class(...))` (the events,
    then the working turns, summed in Python) agree, here on T-40118 with a priced summary and on a ticket
    of 700 turns and 100 compactions of varied costs, some with a turn at the compaction's own turn."""
    seed = import_t40118(scenario)
    CompactionEvent.objects.filter(ticket=seed, status="applied").update(cost_usd=Decimal("0.000900"))
    long = long_ticket("T-SAVE", 700, compact_every=7)
    for event in CompactionEvent.objects.filter(ticket=long):
        CompactionEvent.objects.filter(pk=event.pk).update(cost_usd=Decimal(event.number % 9) / 10_000)
    for ticket in (get_ticket(seed.ticket_id), get_ticket(long.ticket_id)):  # with its class
        [cost] = costs_by_class(CompactionEvent.objects.filter(ticket=ticket)).values()
        with django_assert_num_queries(1):
            aggregated = ticket_savings(ticket)
        assert aggregated == summary_of(cost.compactions, cost.prices)
        assert aggregated is not None and aggregated.tokens_not_resent > 0


def test_a_long_ticket_asks_for_its_savings_on_a_request_of_its_own(sam: Client) -> None:
    """Past SAVINGS_INLINE_TURNS the page reads no working turn: the cost card asks for the savings line
    with htmx (a link without it), and that fragment carries the figures the short page would show."""
    ticket = long_ticket("T-LONGSAVE", SAVINGS_INLINE_TURNS + 100, compact_every=50)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    card = html[html.index('id="card-cost"') :]
    card = card[: card.index("</div>")]
    assert "tokens not re-sent" not in card
    assert 'href="?savings=on#card-cost" hx-get="?savings=on" hx-trigger="load"' in card
    fragment = sam.get(
        f"/tickets/{ticket.ticket_id}/?savings=on",
        headers={"HX-Request": "true", "HX-Target": "card-savings"},
    ).content.decode()
    saved = ticket_savings(ticket)
    assert saved is not None
    line = f"saves {usd(saved.savings_usd)} · {saved.tokens_not_resent} tokens not re-sent"
    assert fragment.startswith('<br><small class="cost-savings" id="card-savings"') and line in fragment
    assert "<html" not in fragment
    # Without htmx, the link is the whole page with the line in place.
    assert line in sam.get(f"/tickets/{ticket.ticket_id}/?savings=on").content.decode()
