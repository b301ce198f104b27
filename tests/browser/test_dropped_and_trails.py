"""What was dropped and complete trails, in headless Chromium at 1440 and 390 px: the review's dropped
passages marked, "Pin this" pre-filled and saved with a reason into the state and the audit trail; a
decision and an open question added from the ticket page; a review in the ticket's audit trail; the
queue's first screen at 390 px with its filters collapsed. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from compaction.models import CompactionEvent
from compaction.reviews import compaction_review_record
from tests.browser.conftest import screenshot
from tests.browser.desk_data import import_seed_t40118, supervisor
from tests.browser.test_dashboard import log_in
from tests.browser.test_phone_layouts import in_first_screen
from tests.factories import chat
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DELAY = "and should show within 3-5 business days."


def height_for(width: int) -> int:
    return 844 if width < 700 else 900


@pytest.mark.parametrize("width", [1440, 390])
def test_pin_a_dropped_passage_into_an_audited_state_change(
    page: Any, live_server: Any, scenario: dict, width: int
) -> None:
    supervisor("sam")
    ticket = import_seed_t40118(scenario)
    height = height_for(width)
    page.set_viewport_size({"width": width, "height": height})
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}/tickets/{ticket.ticket_id}/compactions/2/")

    # MISSING still comes first, in the first screen on a phone too.
    assert in_first_screen(page.locator("#missing-first"), height)
    dropped = page.locator("#dropped")
    expect(dropped.get_by_role("heading", level=2)).to_contain_text("Dropped from the conversation")
    mark = dropped.locator("mark.dropped", has_text=DELAY)
    expect(mark).to_have_count(1)
    # The mark says so to a screen reader, not only in colour.
    expect(mark.locator(".visually-hidden")).to_have_text("Dropped:")
    # The $40 refund is pinned (A1): not marked.
    expect(dropped.locator("mark.dropped", has_text="$40")).to_have_count(0)
    mark.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-dropped-01-marked")

    # One click opens the correction it looks like, filled in with the passage and its turn.
    anchor = mark.get_attribute("id")
    pin = dropped.locator(f'details.pin[data-passage="{anchor}"]')
    pin.locator("summary").click()
    form = pin.locator("form")
    expect(form.get_by_label("Pin as")).to_have_value("decision_made")
    expect(form.get_by_label("Text")).to_have_value(DELAY)
    expect(form.get_by_label("At turn")).to_have_value("8")
    reason = form.get_by_label("Reason")
    expect(reason).to_have_attribute("required", "")
    screenshot(page, f"w{width}-dropped-02-pin-form")
    # No reason: the browser keeps the form, nothing is posted.
    form.get_by_role("button", name="Pin it (turn 8)").click()
    assert reason.evaluate("e => e.validity.valueMissing")
    expect(page).to_have_url(f"{live_server.url}/tickets/{ticket.ticket_id}/compactions/2/")

    reason.fill("the promised refund delay was dropped by compaction #2")
    form.get_by_role("button", name="Pin it (turn 8)").click()
    # The ticket page: the state shows the new decision, the audit trail the supervisor's change.
    expect(page).to_have_url(f"{live_server.url}/tickets/{ticket.ticket_id}/#state")
    decisions = page.locator("#state-panel div.cat.cat-decisions")
    expect(decisions).to_contain_text(DELAY)
    expect(decisions).to_contain_text("turn 8")
    first = page.locator("#audit-trail tbody tr").first
    expect(first).to_contain_text("Decision made")
    expect(first).to_contain_text("sam")
    expect(first).to_contain_text("turn 8")
    expect(first).to_contain_text("the promised refund delay was dropped by compaction #2")
    page.locator("#state-panel").scroll_into_view_if_needed()
    screenshot(page, f"w{width}-dropped-03-pinned-state-and-audit")

    # Back on the review, the passage is no longer dropped.
    page.goto(f"{live_server.url}/tickets/{ticket.ticket_id}/compactions/2/")
    expect(page.locator("#dropped mark.dropped", has_text=DELAY)).to_have_count(0)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.js_errors == []


@pytest.mark.parametrize("width", [1440, 390])
def test_a_decision_and_a_question_from_the_ticket_page_and_the_review_in_its_trail(
    page: Any, live_server: Any, scenario: dict, width: int
) -> None:
    rita = supervisor("rita")
    supervisor("sam")
    ticket = import_seed_t40118(scenario)
    event = CompactionEvent.objects.get(ticket=ticket, number=2)
    compaction_review_record(event=event, by=rita, verdict="summary_bad", comment="dropped the $40 refund")
    page.set_viewport_size({"width": width, "height": height_for(width)})
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}{ticket.get_absolute_url()}")

    review_row = page.locator("#audit-trail tr.audit-review")
    expect(review_row).to_contain_text("rita")
    expect(review_row).to_contain_text("Summary bad")
    expect(review_row).to_contain_text("dropped the $40 refund")

    for op, text, category in (
        ("decision_made", "refund the table only, not the parasol", "cat-decisions"),
        ("question_opened", "did both parasol boxes arrive undamaged?", "cat-open_questions"),
    ):
        correction = page.locator(f'details.correction[data-op="{op}"]')
        correction.locator("summary").click()
        correction.get_by_label("Text").fill(text)
        correction.get_by_label("Reason").fill("agreed on the phone")
        correction.get_by_role("button", name="Save correction").click()
        expect(page.locator("#state-panel .notice.ok")).to_contain_text("Correction saved")
        expect(page.locator(f"#state-panel div.cat.{category}")).to_contain_text(text)
        expect(page.locator("#audit-trail tbody tr").first).to_contain_text("agreed on the phone")
    expect(page.locator("#audit-trail tbody tr").first).to_contain_text("Question opened")
    expect(page.locator("#audit-trail tr.audit-review")).to_have_count(1)  # still there after the swap
    page.locator("#state-panel").scroll_into_view_if_needed()
    screenshot(page, f"w{width}-trails-01-decision-question-review")
    assert page.js_errors == []


@pytest.mark.parametrize("width", [1440, 390])
def test_the_queue_first_screen_holds_the_first_card_with_filters_collapsed_on_a_phone(
    page: Any, live_server: Any, scenario: dict, width: int
) -> None:
    supervisor("sam")
    import_seed_t40118(scenario)
    small, _ = TicketClass.objects.get_or_create(slug="chat-4k", defaults={"token_budget": 4000})
    for n in range(6):  # more tickets than a screen, none flagged
        chat(
            open_ticket(ticket_id=f"T-9{n}", order_id=f"SU-9{n}", seller_type="retail", ticket_class=small), 2
        )
    assert Ticket.objects.count() == 7
    height = height_for(width)
    page.set_viewport_size({"width": width, "height": height})
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}/?flags=coverage_miss")

    more = page.locator("form.filters details.filter-more")
    flags_box = page.locator("form.filters fieldset.flags")
    row = page.locator("#results tr.ticket-row").first
    expect(row.get_by_role("link", name="T-40118")).to_be_visible()
    if width < 700:
        summary = more.locator("summary")
        expect(summary).to_have_text("Filters (1 active)")
        expect(flags_box).to_be_hidden()
        for part in (row.locator(".flag-miss"), row.locator("td.tokens .bar-label")):
            assert in_first_screen(part, height), part.bounding_box()
        screenshot(page, f"w{width}-queue-01-first-screen")
        summary.click()
        expect(flags_box).to_be_visible()
        page.get_by_label("Refused repeats").check()
        expect(summary).to_have_text("Filters (2 active)")
        screenshot(page, f"w{width}-queue-02-filters-open")
    else:
        expect(more.locator("summary")).to_be_hidden()
        expect(flags_box).to_be_visible()  # in line, nothing to open
        assert in_first_screen(row.locator(".flag-miss"), height)
        screenshot(page, f"w{width}-queue-01-first-screen")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.js_errors == []
