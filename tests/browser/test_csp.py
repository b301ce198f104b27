"""The Content-Security-Policy in Chromium: no violation on the pages, the API docs still render, and
htmx still swaps. Violations are caught from the console and from `securitypolicyviolation` events."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.desk_data import PASSWORD, import_t40118, supervisor

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WATCH_VIOLATIONS = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


def watched(page: Any) -> list[str]:
    console: list[str] = []
    page.on(
        "console", lambda msg: console.append(msg.text) if "Content Security Policy" in msg.text else None
    )
    page.add_init_script(WATCH_VIOLATIONS)
    return console


def violations(page: Any, console: list[str]) -> list[str]:
    return console + page.evaluate("window.__csp || []")


def test_the_queue_and_ticket_pages_run_htmx_with_no_csp_violation(
    page: Any, live_server: Any, scenario: dict
) -> None:
    console = watched(page)
    supervisor("sam")
    import_t40118(scenario)
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("sam")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tickets")).to_be_visible()
    response = page.request.get(f"{live_server.url}/")
    assert "script-src 'self' 'nonce-" in response.headers["content-security-policy"]
    page.locator("#id_q").fill("T-401")  # htmx swaps the results in place and pushes the URL
    expect(page).to_have_url(re.compile(r"/\?q=T-401"), timeout=5000)
    expect(page.locator("body")).to_contain_text("T-40118")
    assert page.evaluate("typeof htmx") == "object"
    assert page.evaluate("document.querySelectorAll('style').length") == 0  # no injected indicator styles
    for path in (
        "/tickets/T-40118/",
        "/tickets/T-40118/replay/?turn=22",
        "/tickets/T-40118/compactions/2/",
        "/metrics/",
    ):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
    assert violations(page, console) == []
    assert page.js_errors == []


def test_the_api_docs_render_their_operations_under_their_policy(page: Any, live_server: Any) -> None:
    console = watched(page)
    page.goto(f"{live_server.url}/api/v1/docs/")
    expect(page.locator(".opblock").first).to_be_visible(timeout=10_000)
    assert page.locator(".opblock").count() >= 8
    expect(page.locator("body")).to_contain_text("/api/v1/tickets/{ticket_id}/state/")
    policy = page.request.get(f"{live_server.url}/api/v1/docs/").headers["content-security-policy"]
    assert (
        "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    )
    assert violations(page, console) == []
    assert page.js_errors == []
