"""A long ticket's page in headless Chromium at 1440 and 390 px: the chart draws its newest compactions and
says where the older ones are, the cost card fetches what they saved on its own request (htmx, on load), a
state of hundreds of actions draws its newest and its open intents and links to the rest, and nothing scrolls
sideways. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from bench.fixtures import grow_state
from desk.pages.ticket import CHART_COMPACTIONS, PINS_PER_TURN, SAVINGS_INLINE_TURNS
from desk.pages.ticket.actions import ACTIONS_SHOWN
from tests.browser.conftest import screenshot
from tests.browser.desk_data import supervisor
from tests.browser.test_dashboard import log_in
from tests.factories import long_ticket
from tickets.models import PinnedState
from tickets.services.actions import record_action

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1440, 390])
def test_a_long_ticket_draws_its_newest_compactions_and_loads_its_savings(
    page: Any, live_server: Any, width: int
) -> None:
    supervisor("sam")
    turns = SAVINGS_INLINE_TURNS + 100
    long_ticket("T-LONG", turns, compact_every=10)
    page.set_viewport_size({"width": width, "height": 844 if width < 700 else 900})
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}/tickets/T-LONG/")
    # The savings line replaces its placeholder once the fragment has loaded.
    savings = page.locator("#card-savings")
    expect(savings).to_contain_text("tokens not re-sent")
    expect(savings.get_by_role("link")).to_have_count(0)
    chart = page.locator("svg.chart-narrow" if width < 700 else "svg.chart")
    expect(chart).to_be_visible()
    assert chart.locator("g.drop").count() == CHART_COMPACTIONS
    note = page.locator("#chart-note")
    older = turns // 10 - CHART_COMPACTIONS
    expect(note).to_contain_text(f"{older} older compactions not drawn")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"w{width}-long-ticket", full_page=True)
    note.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-long-ticket-chart")
    # The note's link opens the timeline at the turns before the chart's, with their compaction markers.
    note.get_by_role("link", name="on the timeline", exact=False).click()
    expect(page.locator("#timeline li.marker").first).to_be_visible()
    assert not page.js_errors, page.js_errors


@pytest.mark.parametrize("width", [1440, 390])
def test_a_long_state_draws_its_newest_actions_and_open_intents_and_links_to_the_rest(
    page: Any, live_server: Any, width: int
) -> None:
    supervisor("sam")
    ticket = long_ticket("T-STATE", 40)
    record_action(
        ticket=ticket,
        tool="issue_refund",
        item="old-intent",
        amount_cents=500,
        idempotency_key="intent",
        status="intended",
    )
    grow_state(ticket, 600)  # A1 the intent, A2-A600 refunds of $1, all pinned from turn 40
    page.set_viewport_size({"width": width, "height": 844 if width < 700 else 900})
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}/tickets/T-STATE/")
    actions = page.locator("#actions-taken")
    expect(actions.locator("li[data-item]")).to_have_count(ACTIONS_SHOWN + 1)
    expect(actions.locator('li[data-item="A1"] .tag-intent')).to_have_text("open intent")
    expect(actions.locator("#older-actions")).to_contain_text("549 older actions not listed")
    expect(actions).to_contain_text("Refunded total $599.00")
    expect(page.locator("#state-json").get_by_role("link", name="open it")).to_have_attribute(
        "href", "/api/v1/tickets/T-STATE/state/"
    )
    turn = page.locator("#turn-40")
    expect(turn.locator(".pin")).to_have_count(PINS_PER_TURN)
    expect(turn.locator(".pin-more")).to_contain_text(f"and {600 - PINS_PER_TURN} more")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    turn.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-long-state-turn-pins")
    page.locator("#state").scroll_into_view_if_needed()
    screenshot(page, f"w{width}-long-state-actions")
    # An old action, not among the suggestions, reversed by typing its id.
    page.locator('details.correction[data-op="action_reversed"] summary').click()
    form = page.locator('details.correction[data-op="action_reversed"] form')
    form.get_by_label("Action").fill("A3")
    form.get_by_label("Reason").fill("refunded twice by the bank")
    form.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-long-state-reversal-form")
    form.get_by_role("button", name="Save correction").click()
    expect(page.locator("#state-panel .notice.ok")).to_be_visible()
    expect(page.locator("#card-refunded")).to_contain_text("$598.00")
    assert [a.id for a in PinnedState.objects.get(ticket=ticket).items.actions_taken if a.reversed] == ["A3"]
    page.locator("#state-panel .notice.ok").scroll_into_view_if_needed()
    screenshot(page, f"w{width}-long-state-reversed")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert not page.js_errors, page.js_errors
