"""The queue's keyset pages in headless Chromium: the pager links swap the results through htmx, push
their URL and keep the filters, at desktop and phone widths."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import screenshot
from tests.browser.desk_data import supervisor
from tests.browser.test_dashboard import log_in
from tickets.models import PinnedState, Ticket, TicketClass, TicketStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1440, 390])
def test_pager_links_walk_the_queue_and_keep_the_filters(page: Any, live_server: Any, width: int) -> None:
    supervisor("sam")
    klass = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    tickets = Ticket.objects.bulk_create(
        Ticket(
            ticket_id=f"B-{i:03d}",
            order_id=f"SU-B{i:03d}",
            seller_type="marketplace",
            ticket_class=klass,
            status=TicketStatus.ESCALATED if i % 2 else TicketStatus.OPEN,
            system_prompt="p",
            system_prompt_tokens=1,
            context_tokens=(i % 3) * 1000,
        )
        for i in range(240)
    )
    PinnedState.objects.bulk_create(PinnedState(ticket=t, data={}) for t in tickets)
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "sam")

    if width < 700:  # on a phone the filters are folded behind "Filters (n active)"
        page.locator("form.filters details.filter-more summary").click()
    page.get_by_label("Status").select_option("escalated")
    page.get_by_label("Sort").select_option("tokens")
    expect(page).to_have_url(re.compile(r"status=escalated.*sort=tokens"))
    results = page.locator("#results")
    expect(results.locator(".count")).to_have_text("120 tickets")
    first_row = results.locator("[data-row-link]").first
    expect(first_row).to_have_text("B-239")

    results.get_by_role("link", name="Older →").click()
    expect(page).to_have_url(re.compile(r"status=escalated.*sort=tokens.*after=1000\.\d+"))
    expect(first_row).not_to_have_text("B-239")
    results.get_by_role("link", name="Last »").click()
    expect(page).to_have_url(re.compile(r"status=escalated.*last=1"))
    expect(results.get_by_role("link", name="Older →")).to_have_count(0)
    expect(results.locator("[data-row-link]").last).to_have_text("B-003")
    expect(page.get_by_label("Status")).to_have_value("escalated")
    screenshot(page, f"w{width}-queue-last-page", full_page=True)
    assert page.js_errors == []
