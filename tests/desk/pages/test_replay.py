"""Replay: the exact context the agent was given right after turn N."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.browser.desk_data import import_t40118

pytestmark = pytest.mark.django_db


def messages_part(html: str) -> str:
    return html[html.index('class="messages replay-messages"') :]


def test_replay_before_and_after_the_compaction_shows_different_contexts(sam: Client, scenario: dict) -> None:
    """At turn 10 the refund turns are verbatim and there is no summary; at turn 22 they are replaced
    by the summary of compaction #2, and the pinned state still carries the refund."""
    import_t40118(scenario)
    before = sam.get("/tickets/T-40118/replay/", {"turn": 10}).content.decode()
    after = sam.get("/tickets/T-40118/replay/", {"turn": 22}).content.decode()
    assert 'id="replay-turn">10<' in before and 'id="replay-turn">22<' in after
    early, late = messages_part(before), messages_part(after)
    assert 'data-turn="6"' in early and "Summary of earlier turns" not in early
    assert "No compaction yet" in before
    assert 'data-turn="6"' not in late and "Summary of earlier turns" in late
    assert 'data-turn="22"' in late and 'data-turn="23"' not in late
    assert "Summary of compaction" in after
    # The pinned state as of each turn: the question Q1 was opened at turn 20.
    assert "photo of the second item" not in before and "photo of the second item" in after
    assert "refunded_cents_total&quot;:4000" in late


def test_replay_of_turn_5_has_no_refund_yet(sam: Client, scenario: dict) -> None:
    import_t40118(scenario)
    html = sam.get("/tickets/T-40118/replay/", {"turn": 5}).content.decode()
    assert "refunded_cents_total&quot;:0" in html
    assert 'data-turn="6"' not in messages_part(html)


def test_an_htmx_request_gets_the_context_fragment_and_pushes_the_url(sam: Client, scenario: dict) -> None:
    import_t40118(scenario)
    response = sam.get("/tickets/T-40118/replay/", {"turn": 3}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="replay-context"')
    assert response["HX-Push-Url"] == "/tickets/T-40118/replay/?turn=3"


@pytest.mark.parametrize("turn", ["0", "27", "abc"])
def test_a_turn_outside_the_ticket_is_refused(sam: Client, scenario: dict, turn: str) -> None:
    import_t40118(scenario)
    assert sam.get("/tickets/T-40118/replay/", {"turn": turn}).status_code == 400


def test_replay_without_a_turn_shows_the_latest(
    sam: Client, scenario: dict, django_assert_max_num_queries: Any
) -> None:
    import_t40118(scenario)
    # ... the assembled context, then the turn's stored figures and the state changes at that turn
    with django_assert_max_num_queries(11):
        html = sam.get("/tickets/T-40118/replay/").content.decode()
    assert 'id="replay-turn">26<' in html
