"""The facts first on any screen, in headless Chromium at 1440 and 390 px: the queue's flags and tokens
in the first screen, the ticket's pinned state before its timeline below two columns, and the review's
MISSING list in the first screen. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import screenshot
from tests.browser.desk_data import import_seed_t40118, supervisor
from tests.browser.test_dashboard import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HEIGHT = 844  # a phone's first screen; the desktop's is 900


def in_first_screen(locator: Any, height: int) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


@pytest.mark.parametrize("width", [1440, 390])
def test_the_queue_ticket_and_review_lead_with_the_facts(
    page: Any, live_server: Any, scenario: dict, width: int
) -> None:
    supervisor("sam")
    import_seed_t40118(scenario)
    height = HEIGHT if width < 700 else 900
    page.set_viewport_size({"width": width, "height": height})
    log_in(page, live_server.url, "sam")

    # The queue: the ticket's flags and its tokens bar in the first screen, nothing scrolls sideways.
    row = page.locator("#results tr.ticket-row").filter(has=page.get_by_role("link", name="T-40118"))
    miss = row.locator(".flag-miss")
    expect(miss).to_have_text("coverage miss")
    assert in_first_screen(miss, height), miss.bounding_box()
    assert in_first_screen(row.locator("td.tokens .bar-label"), height)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # The viewport is the phone's whole first screen (390 x 844), and on a phone the filters are folded
    # behind "Filters (n active)" so the first card is in it.
    assert page.evaluate("[window.innerWidth, window.innerHeight]") == [width, height]
    flags_box = page.locator("form.filters fieldset.flags")
    if width < 700:
        expect(flags_box).to_be_hidden()
        expect(page.locator("form.filters details.filter-more summary")).to_have_text("Filters (0 active)")
    else:
        expect(flags_box).to_be_visible()
    # j moves the focus to the first row, whose whole row is outlined.
    page.keyboard.press("j")
    expect(row.get_by_role("link", name="T-40118")).to_be_focused()
    assert row.evaluate("e => getComputedStyle(e).outlineStyle") == "solid"
    screenshot(page, f"w{width}-facts-01-queue")

    # The ticket: on a phone the pinned state comes before the timeline.
    row.get_by_role("link", name="T-40118").click()
    expect(page.get_by_role("heading", name="T-40118")).to_be_visible()
    state_top = page.locator("#state-panel").bounding_box()["y"]
    timeline_top = page.locator("#timeline").bounding_box()["y"]
    if width < 700:
        assert state_top < timeline_top
    else:
        assert abs(state_top - timeline_top) < 5  # two columns side by side
    screenshot(page, f"w{width}-facts-02-ticket", full_page=True)

    # The review: MISSING, with the refund the summary dropped, in the first screen.
    page.locator(".stats").get_by_role("link", name=re.compile(r"applied · 2 missed")).click()
    missing = page.locator("#missing-first")
    expect(missing.get_by_role("heading")).to_have_text("MISSING from the summary: 2 pinned items")
    expect(missing.locator('li[data-item="A1"]')).to_contain_text("issue_refund $40.00 garden-table")
    assert in_first_screen(missing, height), missing.bounding_box()
    # Its link leads to the item's place in the summary's coverage.
    missing.get_by_role("link", name="A1").click()
    expect(page.locator("#missing-A1")).to_be_in_viewport()
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, f"w{width}-facts-03-review")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.js_errors == []
