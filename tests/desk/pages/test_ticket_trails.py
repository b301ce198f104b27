"""Complete trails on the ticket page: the supervisors' reviews of its compactions in the audit trail, and
a decision or an open question added from the page (htmx, with a reason, audited)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from compaction.models import CompactionEvent
from compaction.reviews import compaction_review_record
from core.vocabulary import ActorKind
from tests.browser.desk_data import import_seed_t40118, supervisor
from tickets.models import StateChange, Ticket
from tickets.services.actors import Actor
from tickets.services.state_changes import correct_state

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true", "HX-Target": "state-panel"}


def between(html: str, start: str, end: str) -> str:
    begin = html.index(start)
    return html[begin : html.index(end, begin)]


def review(ticket: Ticket, username: str, verdict: str, comment: str) -> None:
    event = CompactionEvent.objects.get(ticket=ticket, number=2)
    compaction_review_record(event=event, by=supervisor(username), verdict=verdict, comment=comment)


def test_a_review_is_in_the_ticket_audit_trail(sam: Client, scenario: dict) -> None:
    ticket = import_seed_t40118(scenario)
    review(ticket, "rita", "summary_bad", "the $40 refund is not in the summary")
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    audit = between(html, 'id="audit-trail"', "</table>")
    row = between(audit, 'class="audit-review"', "</tr>")
    assert "rita" in row and "Summary bad" in row and "the $40 refund is not in the summary" in row
    assert f'href="/tickets/{ticket.ticket_id}/compactions/2/"' in row
    # Newest first: the review came after every state change of the import.
    assert audit.index('class="audit-review"') < audit.index("data-version=")


def test_an_older_review_moves_to_the_older_page_of_the_trail(sam: Client, scenario: dict) -> None:
    ticket = import_seed_t40118(scenario)
    review(ticket, "rita", "fine", "")
    sam_user = User.objects.get(username="sam")
    for n in range(21):  # more than a window of changes after the review
        ticket.refresh_from_db()
        correct_state(
            ticket=ticket,
            by=Actor(kind=ActorKind.SUPERVISOR, user=sam_user),
            reason=f"note {n}",
            expected_version=ticket.pinned_state.version,
            op="decision_made",
            text=f"decision number {n}",
        )
    newest = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    assert 'class="audit-review"' not in between(newest, 'id="audit-trail"', "</table>")
    older = between(newest, 'class="older"', "</a>")
    version = int(older.split("before v")[1].split(")")[0])
    page = sam.get(f"/tickets/{ticket.ticket_id}/?audit_before={version}").content.decode()
    assert 'class="audit-review"' in between(page, 'id="audit-trail"', "</table>")


@pytest.mark.parametrize(
    ("op", "text", "category", "label"),
    [
        ("decision_made", "refund approved for the scratched leg only", "decisions", "Decision made"),
        ("question_opened", "did both parasol boxes arrive?", "open_questions", "Question opened"),
    ],
)
def test_a_decision_and_a_question_from_the_page(
    sam: Client, scenario: dict, op: str, text: str, category: str, label: str
) -> None:
    ticket = import_seed_t40118(scenario)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    assert f'data-op="{op}"' in html
    version = ticket.pinned_state.version
    url = f"/tickets/{ticket.ticket_id}/state/"
    data = {"op": op, "expected_version": version, "text": text, "at_turn": 12}
    refused = sam.post(url, data, headers=HTMX)
    assert refused.status_code == 422 and "A reason is required" in refused.content.decode()
    assert ticket.pinned_state.__class__.objects.get(pk=ticket.pinned_state.pk).version == version
    response = sam.post(url, {**data, "reason": "said on the phone"}, headers=HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert text.replace("?", "") in body and "Correction saved" in body
    change = StateChange.objects.get(ticket=ticket, to_version=version + 1)
    assert (change.op, change.actor_kind, change.at_turn, change.reason) == (
        op,
        "supervisor",
        12,
        "said on the phone",
    )
    items = ticket.pinned_state.__class__.objects.get(pk=ticket.pinned_state.pk).agent_json()[category]
    assert items[-1]["text"] == text and items[-1]["at_turn"] == 12
    assert label in between(body, 'id="audit-trail"', "</table>")


def test_an_empty_decision_is_refused(sam: Client, scenario: dict) -> None:
    ticket = import_seed_t40118(scenario)
    data = {
        "op": "decision_made",
        "expected_version": ticket.pinned_state.version,
        "text": " ",
        "reason": "x",
    }
    response = sam.post(f"/tickets/{ticket.ticket_id}/state/", data, headers=HTMX)
    assert response.status_code == 422
    assert "This field is required for this correction." in response.content.decode()
    assert not StateChange.objects.filter(ticket=ticket, op="decision_made").exists()
