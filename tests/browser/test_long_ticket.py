"""A long ticket's page in headless Chromium at 1440 and 390 px: the chart draws its newest compactions and
says where the older ones are, the cost card fetches what they saved on its own request (htmx, on load), and
nothing scrolls sideways. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from desk.pages.ticket import CHART_COMPACTIONS, SAVINGS_INLINE_TURNS
from tests.browser.conftest import screenshot
from tests.browser.desk_data import supervisor
from tests.browser.test_dashboard import log_in
from tests.factories import long_ticket

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
