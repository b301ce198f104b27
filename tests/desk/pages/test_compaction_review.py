"""Compaction review: the snapshot and the summary side by side, the four categories, misses in red."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.browser.desk_data import hostile_ticket, import_lossy_t40118, import_t40118, supervisor

pytestmark = pytest.mark.django_db


@pytest.fixture
def sam(client: Client) -> Client:
    client.force_login(supervisor())
    return client


def between(html: str, start: str, end: str) -> str:
    begin = html.index(start)
    return html[begin : html.index(end, begin)]


def test_the_lossy_summary_shows_the_refund_highlighted_left_and_missing_right(
    sam: Client, scenario: dict, openai_server: Any
) -> None:
    import_lossy_t40118(scenario, openai_server)
    response = sam.get("/tickets/T-40118/compactions/2/")
    assert response.status_code == 200
    html = response.content.decode()
    before = between(html, 'id="before"', 'id="after"')
    turn6 = between(before, 'data-turn="6"', "</li>")
    assert "cat-actions_taken" in turn6 and "A1 · issue_refund $40.00 garden-table" in turn6
    turn3 = between(before, 'data-turn="3"', "</li>")
    assert "cat-customer_constraints" in turn3
    after = html[html.index('id="after"') :]
    actions = between(after, 'data-category="actions_taken"', "</div>")
    assert "(empty list)" in actions
    assert '<li class="missing" data-item="A1"' in actions
    assert "MISSING" in actions and "issue_refund $40.00 garden-table" in actions
    constraints = between(after, 'data-category="customer_constraints"', "</div>")
    assert '<li class="covered" data-item="C1"' in constraints and "covers C1" in constraints
    assert "missing from the summary" in html
    # The event's figures: summarizer tokens and cost, latency.
    figures = between(html, 'id="event-figures"', "</dl>")
    assert "5200 in · 80 out" in figures and "ms" in figures and "$0.000552" in figures
    assert "openai" in figures and "cheap-summarizer" in figures


def test_a_complete_summary_shows_every_item_covered(sam: Client, scenario: dict) -> None:
    import_t40118(scenario)
    html = sam.get("/tickets/T-40118/compactions/2/").content.decode()
    assert 'class="missing"' not in html
    assert html.count('class="covered"') == 3
    assert "coverage complete" in html


def test_a_deferred_event_is_explained_without_a_snapshot(sam: Client, scenario: dict) -> None:
    import_t40118(scenario)
    html = sam.get("/tickets/T-40118/compactions/1/").content.decode()
    assert "Deferred: the request was over the threshold" in html and "No snapshot" in html


def test_unknown_compaction_is_404(sam: Client, scenario: dict) -> None:
    import_t40118(scenario)
    assert sam.get("/tickets/T-40118/compactions/9/").status_code == 404


def test_review_query_count_is_constant(sam: Client, scenario: dict, django_assert_num_queries: Any) -> None:
    import_t40118(scenario)
    # session + user + roles + ticket + event with snapshot + sibling events + its reviews + the next
    # unreviewed compaction
    with django_assert_num_queries(8):
        assert sam.get("/tickets/T-40118/compactions/2/").status_code == 200


def test_hostile_text_in_a_snapshot_is_escaped(sam: Client, scenario: dict) -> None:
    ticket = hostile_ticket()
    html = sam.get(f"/tickets/{ticket.ticket_id}/replay/?turn=4").content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;" in html


def test_the_page_reads_covers_and_missing_from_the_stored_report_where_a_rerun_disagreed(
    sam: Client,
) -> None:
    """ "photo of the damage received" against the open question: the stored report (which knows the item is
    a question) says answered, so missing; the page once re-ran the match as a constraint and printed
    "covers Q1" beside the flagged miss. It now shows the report's verdict alone."""
    from compaction.coverage import check_coverage
    from compaction.models import CompactionEvent, ContextSnapshot
    from core.vocabulary import CompactionStatus
    from tickets.models import TicketClass
    from tickets.services.lifecycle import open_ticket

    klass = TicketClass.objects.create(slug="photo-case", token_budget=4000)
    ticket = open_ticket(ticket_id="T-PHOTO", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    state = {
        "actions_taken": [],
        "customer_constraints": [],
        "open_questions": [{"id": "Q1", "text": "photo of the damage", "at_turn": 2}],
        "decisions": [],
    }
    summary = {
        "actions_taken": [],
        "customer_constraints": [],
        "open_questions": ["photo of the damage received"],
        "decisions": [],
        "narrative": "",
    }
    report = check_coverage(state, summary)
    assert [m["id"] for m in report.missing] == ["Q1"]
    event = CompactionEvent.objects.create(
        ticket=ticket,
        number=1,
        at_turn=4,
        status=CompactionStatus.APPLIED,
        first_replaced_turn=1,
        last_replaced_turn=3,
        tokens_before=900,
        threshold_tokens=800,
        summary=summary,
        coverage=report.as_json(),
        coverage_missing_count=len(report.missing),
    )
    ContextSnapshot.objects.create(event=event, messages=[], pinned_state=state, summary=summary)

    html = sam.get("/tickets/T-PHOTO/compactions/1/").content.decode()
    questions = between(html, 'data-category="open_questions"', "</div>")
    assert '<li class="missing" data-item="Q1"' in questions
    assert "photo of the damage received" in questions
    assert "covers Q1" not in questions


def test_the_page_names_the_entry_the_stored_report_says_covered_an_item(sam: Client, scenario: dict) -> None:
    import_t40118(scenario)
    html = sam.get("/tickets/T-40118/compactions/2/").content.decode()
    assert html.count("covers ") >= 3
