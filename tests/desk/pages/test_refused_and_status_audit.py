"""The ticket page shows the desk's refusals on the timeline and the ticket's status changes with why."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils.html import escape

from tests.browser.desk_data import import_t40118
from tickets.models import RefusedAttempt, Ticket, TicketStatusChange

pytestmark = pytest.mark.django_db


def _turn_block(html: str, number: int) -> str:
    """The timeline from turn `number` up to the next turn (its markers included)."""
    start = html.index(f'id="turn-{number}"')
    following = html.find(f'id="turn-{number + 1}"', start)
    end = following if following != -1 else html.index("</ol>", start)
    return html[start:end]


def test_the_demo_ticket_shows_its_refused_second_refund_at_turn_26(sam: Client) -> None:
    call_command("load_demo", "--tickets", "0", stdout=StringIO())
    attempt = RefusedAttempt.objects.get(ticket__ticket_id="T-40118")
    html = sam.get("/tickets/T-40118/").content.decode()
    turn26 = _turn_block(html, 26)
    assert 'class="marker marker-refused"' in turn26
    assert "refused: issue_refund 4000 cents for garden-table — repeat of A1" in turn26
    assert escape(attempt.message) in turn26  # the message, as the desk sent it to the agent
    assert html.count("marker-refused") == 1
    assert "marker-refused" not in _turn_block(html, 25)


def test_a_refused_attempt_sent_without_item_or_amount_is_placed_by_its_at_turn(
    sam: Client, scenario: dict
) -> None:
    """An agent's repeat with no item, no amount and no thread turn recorded still shows, at its turn."""
    ticket = import_t40118(scenario, until=8)
    RefusedAttempt.objects.create(
        ticket=ticket,
        actor_kind="agent",
        tool="cancel_order",
        at_turn=7,
        request={"tool": "cancel_order"},
        earlier_action_id="A2",
        message="already cancelled <b>by A2</b>",
    )
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    turn7 = _turn_block(html, 7)
    assert "refused: cancel_order — repeat of A2" in turn7
    assert "already cancelled &lt;b&gt;by A2&lt;/b&gt;" in turn7  # the message is escaped


def test_a_refused_attempt_with_no_turn_on_the_timeline_is_still_shown(sam: Client, scenario: dict) -> None:
    ticket = import_t40118(scenario, until=4)
    RefusedAttempt.objects.create(
        ticket=ticket,
        actor_kind="agent",
        tool="issue_refund",
        item="lamp",
        amount_cents=1500,
        thread_turn=0,
        at_turn=None,
        request={},
        earlier_action_id="A1",
        message="repeat",
    )
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    assert "refused: issue_refund 1500 cents for lamp — repeat of A1" in html


def test_a_status_change_without_a_reason_is_a_400_and_changes_nothing(sam: Client, scenario: dict) -> None:
    ticket = import_t40118(scenario, until=4)
    for data in ({"status": "escalated"}, {"status": "escalated", "reason": "   "}):
        response = sam.post(f"/tickets/{ticket.ticket_id}/status/", data)
        assert response.status_code == 400
        assert "A reason is required" in response.content.decode()
    ticket.refresh_from_db()
    assert ticket.status == "open"
    assert not TicketStatusChange.objects.filter(ticket=ticket).exists()


def test_the_ticket_page_lists_status_changes_with_who_from_to_and_why(sam: Client, scenario: dict) -> None:
    ticket = import_t40118(scenario, until=4)
    sam.post(f"/tickets/{ticket.ticket_id}/status/", {"status": "escalated", "reason": "  wants a manager  "})
    sam.post(f"/tickets/{ticket.ticket_id}/status/", {"status": "resolved", "reason": "refund confirmed"})
    change = TicketStatusChange.objects.filter(ticket=ticket).order_by("pk").first()
    assert change is not None and change.reason == "wants a manager"
    assert Ticket.objects.get(pk=ticket.pk).status == "resolved"
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    audit = html[html.index('id="status-changes"') :]
    rows = audit.split("<tr data-status-change=")[1:]
    assert len(rows) == 2
    newest, oldest = rows
    assert "Escalated" in newest and "Resolved" in newest and "refund confirmed" in newest
    assert "Open" in oldest and "Escalated" in oldest and "wants a manager" in oldest
    assert change.actor is not None and change.actor.username in oldest
