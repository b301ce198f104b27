"""The demo's payments ledger in headless Chromium: the refund the agent never recorded and the refund the ledger
never saw are flagged on the queue and explained on their ticket pages, and a supervisor resolves one there, at
desktop and phone widths."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from desk.demo import demo_ledger_tickets
from ledger.models import LedgerResolution
from tests.browser.conftest import screenshot
from tests.browser.desk_data import supervisor
from tests.browser.test_dashboard import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
DEMO_TICKETS = 16  # the fewest generated tickets that hold both stories


@pytest.mark.parametrize("width", [1440, 390])
def test_the_demo_ledgers_two_mismatches_are_flagged_explained_and_resolved(
    page: Any, live_server: Any, width: int
) -> None:
    supervisor("sam")  # first: it makes the roles' groups, which a flushed database lacks
    call_command("load_demo", tickets=DEMO_TICKETS, stdout=io.StringIO())
    unrecorded, unconfirmed = demo_ledger_tickets(DEMO_TICKETS)
    assert unrecorded and unconfirmed
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "sam")

    if width < 700:  # on a phone the filters are folded behind "Filters (n active)"
        page.locator("form.filters details.filter-more summary").click()
    page.get_by_label("Ledger mismatches").check()
    expect(page).to_have_url(re.compile(r"flags=ledger_mismatch"))
    results = page.locator("#results")
    expect(results.locator(".count")).to_have_text("2 tickets")
    expect(results.locator("tr", has_text=unrecorded).locator(".flag-ledger")).to_have_text(
        "ledger: unrecorded money"
    )
    expect(results.locator("tr", has_text=unconfirmed).locator(".flag-ledger")).to_have_text(
        "ledger: unconfirmed action"
    )
    screenshot(page, f"w{width}-ledger-queue", full_page=True)

    results.get_by_role("link", name=unrecorded).click()
    panel = page.locator("#ledger")
    expect(panel).to_be_visible()
    row = panel.locator("[data-outcome=unrecorded]")
    expect(row).to_contain_text("Money moved, no action recorded")
    expect(row).to_contain_text(f"re_demo_{unrecorded}")
    expect(row).to_contain_text("that no action on the ticket records")
    expect(row).to_contain_text("the pinned state under-reports")
    panel.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-ledger-unrecorded")

    row.get_by_label("Resolve").select_option("added_action")
    row.get_by_label("Reason").fill("the refund tool ran; the agent's state never heard of it")
    row.get_by_role("button", name="Resolve").click()
    expect(page.get_by_role("status").filter(has_text="Ledger mismatch resolved.")).to_be_visible()
    expect(panel.locator("[data-outcome=matched]")).to_contain_text("confirms A")
    expect(panel.locator("[data-outcome=unrecorded]")).to_have_count(0)
    expect(page.locator("#card-refunded")).to_contain_text("$25.00")
    screenshot(page, f"w{width}-ledger-resolved")
    resolution = LedgerResolution.objects.get()
    assert (resolution.resolution, resolution.by.username) == ("added_action", "sam")

    page.goto(f"{live_server.url}/tickets/{unconfirmed}/")
    row = page.locator("#ledger [data-outcome=unconfirmed]")
    expect(row).to_contain_text("Action recorded, the ledger never saw it")
    expect(row).to_contain_text("the ledger has no entry for it")
    expect(row.get_by_label("Resolve")).to_contain_text("Action marked failed")
    row.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-ledger-unconfirmed")
    assert page.js_errors == []
