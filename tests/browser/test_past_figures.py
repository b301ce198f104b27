"""Past figures never move, in headless Chromium at 1440 and 390 px: an admin changes the class's budget
and threshold (a reason is asked for and kept), a turn comes in under the new figures, and the chart
still labels the old turns with the old lines while the replay of the compacted turn keeps its own
budget. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from desk.turns import receive_turn
from tests.browser.conftest import screenshot
from tests.browser.desk_data import admin, import_seed_t40118
from tests.browser.test_dashboard import log_in
from tickets.models import Ticket, TicketClassChange

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1440, 390])
def test_a_budget_change_keeps_the_old_turns_labels_and_asks_a_reason(
    page: Any, live_server: Any, scenario: dict, width: int
) -> None:
    admin("ada")
    ticket = import_seed_t40118(scenario, until=22)
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "ada")

    # The admin changes the class from 8000/0.8 to 6000/0.5: without a reason the form says so.
    page.goto(f"{live_server.url}/admin/tickets/ticketclass/{ticket.ticket_class.pk}/change/")
    page.locator("#id_token_budget").fill("6000")
    page.locator("#id_compaction_threshold").fill("0.5")
    page.locator("input[name=_save]").click()
    expect(page.locator(".errorlist")).to_contain_text("Say why the class changes")
    page.locator("#id_change_reason").fill("Shorter contexts for the season")
    page.locator("input[name=_save]").click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    change = TicketClassChange.objects.get(ticket_class=ticket.ticket_class)
    assert change.reason == "Shorter contexts for the season"
    assert change.changed_fields["token_budget"] == (8000, 6000)

    # A turn under the new figures.
    receive_turn(ticket=Ticket.objects.get(pk=ticket.pk), role="customer", content="Any news on the parasol?")

    page.goto(f"{live_server.url}{ticket.get_absolute_url()}")
    chart = page.locator("svg.chart-narrow" if width < 700 else "svg.chart")
    expect(chart).to_be_visible()
    old = chart.locator('.segment-labels[data-turns="1-22"]')
    new = chart.locator('.segment-labels[data-turns="23-23"]')
    expect(old.locator(".budget-label")).to_be_visible()
    expect(old.locator(".budget-label")).to_have_text("budget 8000")
    expect(old.locator(".threshold-label")).to_have_text("threshold 6400")
    expect(new.locator(".budget-label")).to_have_text("budget 6000")
    expect(new.locator(".threshold-label")).to_have_text("threshold 3000")
    # Each label sits on its own line: the old budget's label above the new one's.
    old_y = float(old.locator(".budget-label").get_attribute("y"))
    new_y = float(new.locator(".budget-label").get_attribute("y"))
    assert old_y < new_y
    # The peaks before the compaction are judged by the threshold then, not by the new one.
    expect(chart.locator('circle[data-turn="21"]')).to_have_attribute("data-threshold", "6400")
    expect(chart.locator('circle[data-turn="23"]')).to_have_attribute("data-threshold", "3000")
    expect(page.locator("#card-threshold")).to_contain_text("3000")
    chart.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-past-01-chart-after-budget-change")

    # The replay of the compacted turn: its own budget and threshold, and why its two totals differ.
    page.goto(f"{live_server.url}/tickets/{ticket.ticket_id}/replay/?turn=22")
    expect(page.locator("#replay-budget")).to_have_text("8000")
    expect(page.locator("#replay-threshold")).to_have_text("6400")
    why = page.locator("#replay-why")
    expect(why).to_contain_text("compaction #2 then replaced turns 1\N{EN DASH}21")
    screenshot(page, f"w{width}-past-02-replay-turn-22")
    assert page.js_errors == []
