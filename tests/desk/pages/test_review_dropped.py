"""What was dropped, on the review page: the replaced turns with every passage that survives neither in
the summary nor in the pinned state marked, each with a "Pin this" correction that goes through the
existing correction path (the supervisor's audited state change, the turn as provenance)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.browser.desk_data import import_seed_t40118
from tickets.models import StateChange

pytestmark = pytest.mark.django_db

REVIEW = "/tickets/T-40118/compactions/2/"


def between(html: str, start: str, end: str) -> str:
    begin = html.index(start)
    return html[begin : html.index(end, begin)]


def dropped_section(html: str) -> str:
    return between(html, 'id="dropped"', "</section>")


def test_the_lossy_summary_drops_passages_that_the_page_marks(sam: Client, scenario: dict) -> None:
    import_seed_t40118(scenario)
    html = sam.get(REVIEW).content.decode()
    section = dropped_section(html)
    assert "Dropped from the conversation" in section
    marks = re.findall(
        r'<mark class="dropped" id="(dropped-\d+-\d+)"><span class="visually-hidden">Dropped: </span>(.*?)</mark>',
        section,
    )
    texts = [t for _, t in marks]
    assert "and should show within 3-5 business days." in texts
    assert "which usually adds two to three days." in texts
    assert "If a box is lost, the seller re-ships for free." in texts
    # The refund is pinned (A1), so its passages are not marked; the summary's constraint is kept too.
    assert not any("$40" in t for t in texts)
    assert not any("I don&#x27;t want a replacement" in t for t in texts)
    # Small talk is never marked.
    assert "Please do." not in texts and "Thanks." not in texts
    # Each mark has its pin, pre-filled with the passage and its turn.
    turn8 = between(section, 'data-turn="8"', "</li>\n  ")
    pin = between(turn8, 'data-passage="dropped-8-', "</details>")
    assert 'name="at_turn" value="8"' in pin
    assert "and should show within 3-5 business days.</textarea>" in pin
    assert '<option value="decision_made" selected>Pin as a decision</option>' in pin
    assert 'name="reason"' in pin and "required" in between(pin, 'name="reason"', ">")


def test_the_kind_is_guessed_per_passage(sam: Client, scenario: dict) -> None:
    import_seed_t40118(scenario)
    section = dropped_section(sam.get(REVIEW).content.decode())
    kinds = dict(re.findall(r'data-passage="(dropped-\d+-\d+)" data-kind="(\w+)"', section))
    assert kinds  # something was dropped
    assert "question_opened" in kinds.values()  # "Could you send a photo of the scratched leg?"
    question = next(a for a, k in kinds.items() if k == "question_opened")
    assert "?" in between(section, f'id="{question}"', "</mark>")
    # "Once I see it I can offer a return, a replacement, or a partial refund": a refund verb, a missed action.
    assert kinds.get("dropped-2-2") == "action_added"
    action_pin = between(section, 'data-passage="dropped-2-2"', "</details>")
    assert 'name="tool" value="issue_refund"' in action_pin


def test_pin_this_lands_in_the_state_and_the_audit_trail(sam: Client, scenario: dict) -> None:
    ticket = import_seed_t40118(scenario)
    version = ticket.pinned_state.version
    passage = "and should show within 3-5 business days."
    response = sam.post(
        f"/tickets/{ticket.ticket_id}/state/",
        {
            "op": "decision_made",
            "expected_version": version,
            "text": passage,
            "at_turn": 8,
            "reason": "the promised delay was dropped by compaction #2",
        },
    )
    assert response.status_code == 302 and response["Location"] == f"/tickets/{ticket.ticket_id}/#state"
    landed = sam.get(response["Location"]).content.decode()
    assert f"Correction saved: the state is now at version {version + 1}." in landed
    change = StateChange.objects.filter(ticket=ticket).latest("to_version")
    assert (
        change.op == "decision_made" and change.actor_kind == "supervisor" and change.actor.username == "sam"
    )
    assert change.at_turn == 8 and change.reason == "the promised delay was dropped by compaction #2"
    ticket.pinned_state.refresh_from_db()
    decision = ticket.pinned_state.agent_json()["decisions"][-1]
    assert decision["text"] == passage and decision["at_turn"] == 8
    # Pinned, the passage is no longer dropped.
    section = dropped_section(sam.get(REVIEW).content.decode())
    assert passage not in re.findall(r'<span class="visually-hidden">Dropped: </span>(.*?)</mark>', section)
    detail = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    audit = between(detail, 'id="audit-trail"', "</table>")
    assert "Decision made" in audit and "the promised delay was dropped" in audit


def test_pin_this_as_a_missed_action_and_without_a_reason(sam: Client, scenario: dict) -> None:
    ticket = import_seed_t40118(scenario)
    version = ticket.pinned_state.version
    base = {
        "op": "action_added",
        "expected_version": version,
        "tool": "issue_refund",
        "amount": "5",
        "at_turn": 2,
    }
    refused = sam.post(f"/tickets/{ticket.ticket_id}/state/", base)
    assert refused.status_code == 422
    assert "A reason is required for every correction." in refused.content.decode()
    assert StateChange.objects.filter(ticket=ticket, op="action_added").count() == 0
    saved = sam.post(
        f"/tickets/{ticket.ticket_id}/state/", {**base, "reason": "goodwill credit offered at turn 2"}
    )
    assert saved.status_code == 302
    change = StateChange.objects.get(ticket=ticket, op="action_added")
    assert change.at_turn == 2 and change.actor_kind == "supervisor"


def test_the_page_stays_at_a_constant_number_of_queries_with_drops(
    sam: Client, scenario: dict, django_assert_num_queries: Any
) -> None:
    import_seed_t40118(scenario)
    # session + user + roles + ticket (with its state) + event with snapshot + siblings + reviews + next
    with django_assert_num_queries(8):
        html = sam.get(REVIEW).content.decode()
    assert html.count('<mark class="dropped"') > 5
    # MISSING comes first, before the dropped section.
    assert html.index('id="missing-first"') < html.index('id="dropped"')
