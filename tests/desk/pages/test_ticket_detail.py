"""The ticket page: timeline, compaction markers, pinned state, context chart and audit trail."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from desk.pages.ticket import get_ticket, ticket_page
from tests.browser.desk_data import HOSTILE, hostile_ticket, import_t40118

pytestmark = pytest.mark.django_db

# session + user + roles + ticket (with class and pinned state) + the window's turns + the compactions counted
# and summed + the header's compactions + those at or replacing the window's turns + the chart's newest
# compactions + the chart's turns + audit trail + its reviews + refused attempts + status changes + ledger
# outcomes + what the compactions saved (one aggregate; a ticket past SAVINGS_INLINE_TURNS asks for it apart)
DETAIL_QUERIES = 16


@pytest.mark.parametrize("until", [4, 26])
def test_ticket_page_query_count_does_not_grow_with_the_turns(
    sam: Client, scenario: dict, django_assert_num_queries: Any, until: int
) -> None:
    """4 turns or 26 turns with two compaction events: the same number of queries."""
    ticket = import_t40118(scenario, until=until)
    with django_assert_num_queries(DETAIL_QUERIES):
        response = sam.get(f"/tickets/{ticket.ticket_id}/")
    assert response.status_code == 200
    assert response.content.decode().count('class="turn ') == until


def test_timeline_shows_roles_tool_calls_tokens_boundaries_and_compaction_markers(
    sam: Client, scenario: dict
) -> None:
    ticket = import_t40118(scenario)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    turn6 = html[html.index('id="turn-6"') : html.index('id="turn-7"')]
    assert "Tool call" in turn6 and "issue_refund" in turn6
    assert "&quot;amount_cents&quot;: 4000" in turn6  # the arguments, pretty-printed
    assert re.search(r"\d+ tok", turn6)
    assert "replaced by #2" in turn6
    assert "A1 · issue_refund $40.00 garden-table" in turn6  # the pinned item came from this turn
    turn8 = html[html.index('id="turn-8"') : html.index('id="turn-9"')]
    assert "refund_issued" in turn8
    assert "Compaction #2</b> after turn 22: turns 1\u201321 replaced" in html
    assert "Compaction #1 deferred</b> at turn 21" in html
    assert "replaced by #2" not in html[html.index('id="turn-23"') :]


def test_pinned_state_and_audit_trail_are_on_the_page(sam: Client, scenario: dict) -> None:
    ticket = import_t40118(scenario)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    panel = html[html.index('id="state-panel"') :]
    assert 'data-item="A1"' in panel and "garden-table" in panel
    assert "no replacement wanted" in panel
    assert "Refunded total <b>$40.00</b>" in panel
    assert "v4" in panel
    audit = panel[panel.index("Audit trail") :]
    assert "Action taken" in audit and "v2→v3" in audit


def test_chart_plots_the_assembled_size_of_every_turn_against_the_threshold(
    sam: Client, scenario: dict
) -> None:
    ticket = import_t40118(scenario)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert 'data-threshold="6400"' in svg
    assert svg.count('<circle class="dot') == 26
    event = ticket.compactions.get(number=2)
    assert f"#2: {event.tokens_before} → {event.tokens_after}" in svg and event.tokens_before > 6400


def test_chart_points_are_the_figures_each_turn_stored(scenario: dict) -> None:
    """Each point is the turn's stored context size with the budget and threshold in force then; the
    compaction's drop is its own event's before and after."""
    ticket = import_t40118(scenario)
    page = ticket_page(get_ticket(ticket.ticket_id))
    stored = {t.number: t for t in ticket.turns.all()}
    for point in page.series.points:
        turn = stored[point.turn]
        assert (point.tokens, point.threshold_tokens, point.token_budget) == (
            turn.context_tokens,
            turn.threshold_tokens,
            turn.token_budget,
        )
        assert not point.replayed
    dropped = [p for p in page.series.points if p.compaction]
    assert [(p.turn, p.compaction.number) for p in dropped] == [(22, 2)]
    event = dropped[0].compaction
    assert event.tokens_before > 6400 > event.tokens_after


def test_customer_html_is_escaped_on_the_ticket_page(sam: Client) -> None:
    hostile_ticket()
    html = sam.get("/tickets/T-666/").content.decode()
    assert HOSTILE not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "<script>window.__pwned" not in html and "<img src=x" not in html


def test_unknown_ticket_is_404(sam: Client) -> None:
    assert sam.get("/tickets/T-NOPE/").status_code == 404


def test_the_ticket_page_shows_what_compaction_cost(sam: Client, scenario: dict, openai_server) -> None:
    import json

    from tests.fake_openai import Reply

    summary = {
        "decisions": [],
        "actions_taken": ["issue_refund 4000 cents garden-table at turn 6"],
        "customer_constraints": ["no replacement wanted"],
        "open_questions": ["photo of the parasol still outstanding"],
        "narrative": "Refunded the scratched table.",
    }
    with openai_server([Reply(content=json.dumps(summary), prompt_tokens=5000, completion_tokens=100)]):
        ticket = import_t40118(scenario, backend="openai")
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    saved = ticket.compactions.get(status="applied").tokens_saved
    assert "Compaction cost" in html
    # 5000 x $0.10/M + 100 x $0.40/M = $0.00054: a sub-cent cost is shown in cents, not as $0.00.
    assert "0.054¢" in html and f"{saved} tokens saved" in html


def test_a_supervisor_escalates_a_ticket_from_its_page(sam: Client, scenario: dict) -> None:
    ticket = import_t40118(scenario, until=8)
    page = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    assert 'action="/tickets/T-40118/status/"' in page and '<option value="open" selected>' in page
    response = sam.post(
        f"/tickets/{ticket.ticket_id}/status/",
        {"status": "escalated", "reason": "customer asked for a manager"},
    )
    assert response.status_code == 302 and response["Location"] == "/tickets/T-40118/"
    ticket.refresh_from_db()
    assert ticket.status == "escalated"
    assert (
        sam.post(f"/tickets/{ticket.ticket_id}/status/", {"status": "gone", "reason": "x"}).status_code == 400
    )
    ticket.refresh_from_db()
    assert ticket.status == "escalated"
