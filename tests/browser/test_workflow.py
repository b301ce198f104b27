"""The supervisors' workflow in headless Chromium at 1440 and 390 px: the seed's lossy compaction shows
MISSING in red, figures stay put, a review steps to the next one, the state's history reads as a diff,
metrics chart per day, and every page fits a phone (tables scroll in their own box) and the keyboard.
Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from compaction.models import CompactionReview
from tests.browser.conftest import screenshot
from tests.browser.desk_data import PASSWORD, import_seed_t40118, supervisor
from tickets.models import Ticket

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MISS_RED = "rgb(220, 38, 38)"
WIDTHS = [1440, 390]


def log_in(page: Any, base_url: str, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{base_url}/accounts/login/")
    page.get_by_label("Username").fill("sam")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tickets")).to_be_visible()


def assert_no_page_scroll(page: Any) -> None:
    """Nothing makes the page itself scroll sideways: wide tables and the chart scroll in their own box."""
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= page.viewport_size["width"], f"page is {wide}px wide"


@pytest.fixture
def seed(live_server: Any, scenario: dict) -> Ticket:
    supervisor("sam")
    return import_seed_t40118(scenario)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_seed_story_shows_missing_in_red_and_is_flagged_and_counted(
    page: Any, live_server: Any, seed: Ticket, width: int
) -> None:
    log_in(page, live_server.url, width)
    assert_no_page_scroll(page)
    if width < 700:  # on a phone the filters are folded behind "Filters (n active)"
        page.locator("form.filters details.filter-more summary").click()
    page.get_by_label("Coverage misses").check()
    results = page.locator("#results")
    expect(results.locator(".flag-miss")).to_have_text("coverage miss")
    expect(results.locator(".flag-review")).to_have_text("to review")
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-01-queue-coverage-miss", full_page=True)

    page.goto(f"{live_server.url}/tickets/T-40118/compactions/2/")
    miss = page.locator('#after [data-category="actions_taken"] li.missing[data-item="A1"]')
    expect(miss).to_contain_text("MISSING")
    expect(miss).to_contain_text("issue_refund $40.00 garden-table")
    assert miss.evaluate("e => getComputedStyle(e).color") == MISS_RED
    expect(page.locator(".narrative")).to_contain_text(
        "cosmetic damage to the table and declined a replacement"
    )
    expect(page.locator("#event-figures")).to_contain_text("¢")  # a sub-cent cost, not $0.000000
    expect(page.locator("#event-figures time")).to_contain_text("UTC")
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-02-review-missing", full_page=True)

    page.goto(f"{live_server.url}/metrics/")
    expect(page.locator('tr[data-class="seed-8k"] .misses')).to_have_text("1")
    expect(page.locator('[data-figure="misses"] rect.day-bar')).to_have_count(1)
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-03-metrics", full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_figures_stay_put_and_a_correction_refreshes_every_card(
    page: Any, live_server: Any, seed: Ticket, width: int
) -> None:
    klass = seed.ticket_class
    klass.token_budget = 16000
    klass.save()
    log_in(page, live_server.url, width)
    page.goto(f"{live_server.url}/tickets/T-40118/")
    expect(page.locator("svg.chart .threshold")).to_have_attribute("data-threshold", "6400")
    expect(page.locator("#card-threshold")).to_contain_text("class now 12800")
    event = seed.compactions.get(status="applied")
    expect(page.locator('svg.chart .drop[data-compaction="2"] text')).to_have_text(
        f"#2: {event.tokens_before} → {event.tokens_after}"
    )
    expect(page.locator(".marker-applied .figures")).to_have_text(
        f"{event.tokens_before} → {event.tokens_after} tokens"
    )
    # A phone gets the narrow chart (its own geometry, with the drop's figures), not the wide one scaled.
    narrow = width < 700
    chart_box = page.locator(".chart-narrow-box" if narrow else ".chart-scroll").bounding_box()
    assert chart_box["width"] <= width
    shown = page.locator("svg.chart-narrow" if narrow else "svg.chart")
    assert shown.bounding_box()["width"] >= min(600, width - 60)  # legible, not squeezed
    expect(shown.locator('.drop[data-compaction="2"] text')).to_be_visible()
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-04-ticket-figures", full_page=False)

    expect(page.locator("#card-refunded")).to_contain_text("$40.00")
    page.locator('details.correction[data-op="action_reversed"] summary').click()
    form = page.locator('details.correction[data-op="action_reversed"] form')
    form.get_by_label("Action").fill("A1")  # typed by id, the newest suggested (a datalist)
    form.get_by_label("Reason").fill("the bank returned the refund")
    form.get_by_role("button", name="Save correction").click()
    expect(page.locator("#state-panel .notice.ok")).to_be_visible()
    expect(page.locator("#card-refunded")).to_contain_text("$0.00")  # the header card, out of band
    seed.refresh_from_db()
    expect(page.locator("#card-context")).to_contain_text(str(seed.context_tokens))
    diff = page.locator("table.audit tr[data-version] .diff-changed").first
    expect(diff).to_contain_text("reversed: no → yes")
    page.locator("#state-panel").scroll_into_view_if_needed()
    screenshot(page, f"w{width}-05-correction-diff")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_supervisor_reviews_and_steps_to_the_next(
    page: Any, live_server: Any, seed: Ticket, scenario: dict, width: int
) -> None:
    from tests.desk.pages.test_review_workflow import forced_ticket

    forced_ticket("T-9001")
    log_in(page, live_server.url, width)
    page.get_by_role("link", name="Review next").click()
    expect(page).to_have_url(re.compile(r"/tickets/T-40118/compactions/2/$"))
    expect(page.locator("#next-unreviewed")).to_contain_text("T-9001 #1")
    page.get_by_label("Summary bad").check()
    page.get_by_label("Comment").fill("Dropped the $40 garden-table refund.")
    screenshot(page, f"w{width}-06-review-form")
    page.get_by_role("button", name=re.compile("Save review")).click()
    expect(page).to_have_url(re.compile(r"/tickets/T-9001/compactions/1/$"))
    expect(page.locator(".messages-flash")).to_contain_text("T-40118 compaction #2 marked summary bad")
    expect(page.locator("#explanation")).to_contain_text("Forced by the hard ceiling")
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-07-forced-explained", full_page=True)
    review = CompactionReview.objects.get()
    assert (review.verdict, review.by.username) == ("summary_bad", "sam")


@pytest.mark.parametrize("width", WIDTHS)
def test_replay_shows_the_turns_state_change_as_a_diff(
    page: Any, live_server: Any, seed: Ticket, width: int
) -> None:
    log_in(page, live_server.url, width)
    page.goto(f"{live_server.url}/tickets/T-40118/replay/?turn=7")
    changes = page.locator("#replay-changes")
    expect(changes.locator(".diff-added")).to_contain_text("A1 issue_refund $40.00 garden-table (turn 6)")
    expect(changes.locator(".diff-changed")).to_contain_text("refunded total: $0.00 → $40.00")
    expect(page.locator("#replay-threshold")).to_have_text("6400")
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-08-replay-diff", full_page=False)


@pytest.mark.parametrize("width", WIDTHS)
def test_keyboard_and_header_on_any_screen(page: Any, live_server: Any, seed: Ticket, width: int) -> None:
    from tests.desk.pages.test_review_workflow import forced_ticket

    forced_ticket("T-9001")
    log_in(page, live_server.url, width)
    header = page.locator("header.top")
    expect(header.get_by_role("link", name="API docs")).to_have_attribute("href", "/api/v1/docs/")
    logout = header.get_by_role("button", name="Log out")
    box = logout.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width  # not clipped
    page.locator("body").press("/")
    expect(page.get_by_label("Search")).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    expect(page.locator("[data-row-link]").nth(0)).to_be_focused()
    page.keyboard.press("j")
    expect(page.locator("[data-row-link]").nth(1)).to_be_focused()
    page.keyboard.press("k")
    expect(page.locator("[data-row-link]").nth(0)).to_be_focused()
    ids = page.locator("[data-row-link]").first.bounding_box()
    assert ids["height"] < 24  # a ticket id never wraps
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-09-keyboard-queue")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/tickets/T-"))
    assert not page.js_errors


@pytest.mark.parametrize("width", WIDTHS)
def test_a_long_ticket_pages_to_older_turns_in_place_and_jumps_to_a_compaction(
    page: Any, live_server: Any, width: int
) -> None:
    from tests.factories import long_ticket

    supervisor("sam")
    long_ticket("T-LONG", 2000)
    log_in(page, live_server.url, width)
    page.goto(f"{live_server.url}/tickets/T-LONG/")
    timeline = page.locator("#timeline")
    expect(timeline.locator("h2")).to_contain_text("turns 1971\u20132000 of 2000")
    # The chart samples the turns after the compaction before its 24 newest (#16 at turn 800): 801-2000.
    expect(page.locator("svg.chart")).to_have_attribute("data-sampled", "1200")
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-10-long-ticket", full_page=False)

    page.evaluate("window.__notReloaded = true")
    timeline.get_by_role("link", name="← Older turns").first.click()
    expect(page.locator("#timeline h2")).to_contain_text("turns 1941\u20131970 of 2000")
    expect(page).to_have_url(re.compile(r"/tickets/T-LONG/\?before=1971$"))
    assert page.evaluate("window.__notReloaded") is True  # swapped in place by htmx
    expect(page.locator("#turn-1941")).to_be_visible()
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-11-long-ticket-older", full_page=False)

    page.locator("#card-compactions .pill-jump").last.click()  # the sixth newest: #35, at turn 1750
    expect(page).to_have_url(re.compile(r"\?turn=1750#compaction-35$"))
    expect(page.locator("#compaction-35")).to_be_in_viewport()
    expect(page.locator("#compaction-35")).to_contain_text("Compaction #35")
    assert_no_page_scroll(page)
    screenshot(page, f"w{width}-12-long-ticket-compaction", full_page=False)
    assert not page.js_errors
