"""Metrics per class: compactions, tokens saved, cost, latency, failure rate."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.browser.desk_data import import_t40118, supervisor

pytestmark = pytest.mark.django_db


def test_metrics_show_compactions_and_tokens_saved_per_class(
    client: Client, scenario: dict, django_assert_num_queries: Any
) -> None:
    ticket = import_t40118(scenario)
    client.force_login(supervisor())
    # session + user + roles + per-class figures + what they saved (the compactions, their tickets' working
    # turns) + per-class-and-day figures + refused attempts + ledger
    with django_assert_num_queries(9):
        html = client.get("/metrics/").content.decode()
    row = html[html.index("<td>standard-8k</td>") :]
    row = row[: row.index("</tr>")]
    applied = ticket.compactions.get(status="applied")
    cells = [c.split("</td>")[0] for c in row.split('<td class="num">')[1:]]
    # applied, forced, failed, deferred, failure rate, tokens saved
    assert cells[:6] == ["1", "0", "0", "1", "0.0%", str(applied.tokens_before - applied.tokens_after)]


def test_a_class_without_compactions_is_listed_with_zeros(client: Client) -> None:
    from tickets.models import TicketClass

    TicketClass.objects.create(slug="large-32k", token_budget=32000, compaction_threshold=0.85)
    client.force_login(supervisor())
    html = client.get("/metrics/").content.decode()
    row = html[html.index("<td>large-32k</td>") :]
    row = row[: row.index("</tr>")]
    cells = [c.split("</td>")[0] for c in row.split('<td class="num">')[1:]]
    assert cells[:3] == ["0", "0", "0"]
