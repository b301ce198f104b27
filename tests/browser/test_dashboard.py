"""The supervisors' dashboard in real headless Chromium: review a lossy compaction, correct the state,
replay a turn, and show hostile customer text as text. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from core.vocabulary import ActorKind
from tests.browser.conftest import screenshot
from tests.browser.desk_data import (
    HOSTILE,
    PASSWORD,
    admin,
    hostile_ticket,
    import_lossy_t40118,
    import_t40118,
    supervisor,
)
from tickets.models import StateChange, Ticket
from tickets.services.state_changes import change_state

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ACTIONS_BLUE = "rgb(37, 99, 235)"
MISS_RED = "rgb(220, 38, 38)"


def log_in(page: Any, base_url: str, username: str, *, shot: str | None = None) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    if shot:
        screenshot(page, shot)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tickets")).to_be_visible()


def test_supervisor_reviews_the_lossy_compaction_corrects_the_state_and_sees_the_audit_row(
    page: Any, live_server: Any, scenario: dict, openai_server: Any
) -> None:
    supervisor("sam")
    import_lossy_t40118(scenario, openai_server)
    log_in(page, live_server.url, "sam", shot="00-login")

    # The queue, filtered by htmx to tickets whose compaction summary missed a pinned item.
    page.get_by_label("Coverage misses").check()
    expect(page).to_have_url(re.compile(r"flags=coverage_miss"))
    results = page.locator("#results")
    expect(results.get_by_role("link", name="T-40118")).to_be_visible()
    expect(results.locator(".flag-miss")).to_have_text("coverage miss")
    screenshot(page, "01-queue")

    # The ticket page: timeline, chart and pinned state.
    results.get_by_role("link", name="T-40118").click()
    expect(page.get_by_role("heading", name="T-40118")).to_be_visible()
    expect(page.locator("svg.chart .threshold")).to_have_attribute("data-threshold", "6400")
    expect(page.locator(".marker-applied")).to_contain_text("Compaction #2")
    screenshot(page, "02-ticket")

    # The compaction review: the refund's turn in the actions colour on the left, missing in red on the right.
    page.locator(".stats").get_by_role("link", name=re.compile(r"#2 applied")).click()
    expect(page.get_by_role("heading", name=re.compile("Compaction #2"))).to_be_visible()
    left = page.locator('#before li[data-turn="6"]')
    expect(left).to_have_class(re.compile(r"\bcat-actions_taken\b"))
    expect(left.locator('.pin[data-item="A1"]')).to_have_text("A1 · issue_refund $40.00 garden-table")
    assert left.evaluate("e => getComputedStyle(e).borderLeftColor") == ACTIONS_BLUE
    miss = page.locator('#after [data-category="actions_taken"] li.missing[data-item="A1"]')
    expect(miss).to_be_visible()
    expect(miss).to_contain_text("MISSING")
    expect(miss).to_contain_text("issue_refund $40.00 garden-table")
    assert miss.evaluate("e => getComputedStyle(e).color") == MISS_RED
    expect(page.locator('#after li.covered[data-item="C1"]')).to_be_visible()
    expect(page.locator("#event-figures")).to_contain_text("5200 in · 80 out")
    screenshot(page, "03-compaction-review")

    # Back on the ticket: pin the constraint the summary blurred, with a reason, inline (htmx).
    page.get_by_role("link", name="T-40118").first.click()
    page.evaluate("window.__notReloaded = true")
    correction = page.locator('details[data-op="constraint_stated"]')
    correction.locator("summary").click()
    correction.get_by_label("Text").fill("refund already issued for the table; do not offer another")
    correction.get_by_label("Reason").fill("The compaction summary dropped the $40 refund")
    correction.get_by_role("button", name="Save correction").click()
    expect(page.locator("#state-panel .notice.ok")).to_contain_text("version 5")
    audit_row = page.locator('table.audit tr[data-version="5"]')
    expect(audit_row).to_contain_text("sam")
    expect(audit_row).to_contain_text("Constraint stated")
    expect(audit_row).to_contain_text("v4→v5")
    expect(audit_row).to_contain_text("The compaction summary dropped the $40 refund")
    assert page.evaluate("window.__notReloaded") is True  # swapped in place, not a full page load
    page.locator("#state-panel").scroll_into_view_if_needed()
    screenshot(page, "04-state-corrected")
    change = StateChange.objects.get(ticket__ticket_id="T-40118", to_version=5)
    assert change.actor_kind == ActorKind.SUPERVISOR and change.actor and change.actor.username == "sam"
    assert page.js_errors == []


def test_a_stale_correction_is_refused_and_the_newer_state_is_shown(
    page: Any, live_server: Any, scenario: dict
) -> None:
    supervisor("sam")
    ticket = import_t40118(scenario)
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}/tickets/T-40118/")
    correction = page.locator('details[data-op="question_resolved"]')
    correction.locator("summary").click()
    correction.get_by_label("Item").select_option("Q1")
    correction.get_by_label("Reason").fill("Photo arrived by email")

    # Meanwhile the agent pins a new constraint: the form's version (4) is now stale.
    change_state(
        op="constraint_stated",
        ticket=Ticket.objects.get(pk=ticket.pk),
        text="only contact by email",
        at_turn=25,
    )

    correction.get_by_role("button", name="Save correction").click()
    notice = page.locator("#state-panel .notice.stale")
    expect(notice).to_contain_text("Refused: the state changed while you were editing.")
    expect(notice).to_contain_text("the state is now at version 5")
    expect(notice).to_contain_text("Constraint stated")
    expect(page.locator('#state-panel [data-item="C2"]')).to_contain_text("only contact by email")
    expect(page.locator('#state-panel [data-item="Q1"]')).to_be_visible()  # not resolved
    expect(page.locator('details[data-op="question_resolved"]')).to_have_attribute("open", "")
    page.locator("#state-panel").scroll_into_view_if_needed()
    screenshot(page, "05-stale-correction")
    assert not StateChange.objects.filter(ticket=ticket, actor_kind=ActorKind.SUPERVISOR).exists()


def test_replay_shows_a_different_context_before_and_after_the_compaction(
    page: Any, live_server: Any, scenario: dict
) -> None:
    supervisor("sam")
    import_t40118(scenario)
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}/tickets/T-40118/replay/?turn=10")
    messages = page.locator(".replay-messages")
    expect(page.locator("#replay-turn")).to_have_text("10")
    expect(messages.locator('[data-turn="6"]')).to_have_count(1)
    expect(messages).not_to_contain_text("Summary of earlier turns")

    page.get_by_label("Turn").select_option("22")
    expect(page.locator("#replay-turn")).to_have_text("22")
    expect(page).to_have_url(re.compile(r"/replay/\?turn=22$"))
    expect(messages.locator('[data-turn="6"]')).to_have_count(0)
    expect(messages).to_contain_text("Summary of earlier turns")
    expect(page.locator("#replay-context")).to_contain_text("Summary of compaction #2 active")
    screenshot(page, "06-replay")


def test_customer_html_and_script_are_shown_as_text_and_never_run(page: Any, live_server: Any) -> None:
    supervisor("sam")
    hostile_ticket("T-666")
    log_in(page, live_server.url, "sam")
    for path in ["/tickets/T-666/", "/tickets/T-666/replay/?turn=4", "/?q=T-666"]:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        assert page.evaluate("window.__pwned") is None, path
    page.goto(f"{live_server.url}/tickets/T-666/")
    turn = page.locator("#turn-1")
    expect(turn.locator(".content")).to_have_text(HOSTILE)
    assert turn.locator("script, img, b").count() == 0
    expect(page.locator('#state-panel [data-item="C1"]')).to_contain_text("<script>window.__pwned=1</script>")
    expect(page.locator("#turn-2 pre.args")).to_contain_text('<img src=x onerror=\\"window.__pwned=2\\">')
    page.wait_for_timeout(300)  # give an onerror handler every chance to fire
    assert page.evaluate("window.__pwned") is None
    assert page.js_errors == []
    screenshot(page, "07-hostile-text")


def test_admin_sees_metrics_and_the_class_budgets(page: Any, live_server: Any, scenario: dict) -> None:
    admin("ada")
    import_t40118(scenario)
    log_in(page, live_server.url, "ada")
    page.get_by_role("link", name="Metrics").click()
    expect(page.get_by_role("cell", name="standard-8k")).to_be_visible()
    screenshot(page, "08-metrics")
    page.get_by_role("link", name="Classes").click()
    expect(page.get_by_role("cell", name="6400")).to_be_visible()
    screenshot(page, "09-classes")
