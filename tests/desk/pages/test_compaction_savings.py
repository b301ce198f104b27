"""What compaction cost and saved, on the ticket page's cost card and the metrics page's per-class rows:
the figures `core.cost` computes (the eval's `cost` object uses the same), read from the database."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from compaction.costs import costs_by_class
from compaction.models import CompactionEvent
from core.cost import summary_of
from desk.pages.formatting import usd
from tests.factories import import_t40118
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
