"""A ticket page left open shows what the agent posts over the API: the new turn under "New since you
opened", without a reload and without losing a correction being typed (headless Chromium, 1440 and
390 px). Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import screenshot
from tests.browser.desk_data import import_seed_t40118, supervisor
from tests.browser.test_dashboard import log_in
from tickets.accounts import create_agent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def post_turn(base_url: str, token: str, ticket_id: str, turn: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{base_url}/api/v1/tickets/{ticket_id}/turns/",
        data=json.dumps(turn).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.loads(response.read())


@pytest.mark.parametrize("width", [1440, 390])
def test_a_turn_posted_over_the_api_appears_on_the_open_page(
    page: Any, live_server: Any, scenario: dict, width: int
) -> None:
    supervisor("sam")
    token = create_agent(name="agent-7")
    ticket = import_seed_t40118(scenario, until=24)
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}{ticket.get_absolute_url()}")
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#live-news")).to_have_count(0)

    # A correction half typed while the agent works.
    correction = page.locator('details[data-op="constraint_stated"]')
    correction.locator("summary").click()
    correction.get_by_label("Text").fill("no second refund for the table")

    answer = post_turn(
        live_server.url, token, ticket.ticket_id, {"role": "customer", "content": "Is the parasol here yet?"}
    )
    assert answer["turn"] == 25
    news = page.locator("#live-news")
    expect(news.locator(".live-marker")).to_have_text("New since you opened", timeout=15_000)
    expect(news).to_contain_text("1 turn")
    expect(news.locator('[data-live-turn="25"]')).to_contain_text("Is the parasol here yet?")
    # The page was not reloaded and the form kept what was typed.
    assert page.evaluate("window.__notReloaded") is True
    expect(correction.get_by_label("Text")).to_have_value("no second refund for the table")
    news.scroll_into_view_if_needed()
    screenshot(page, f"w{width}-live-01-new-turn")

    # The link shows the newest window with the turn in the timeline itself.
    news.get_by_role("link", name="Show the newest turns").click()
    expect(page.locator('#timeline li[data-turn="25"]')).to_contain_text("Is the parasol here yet?")
    assert page.js_errors == []
