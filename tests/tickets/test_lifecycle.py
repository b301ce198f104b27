"""Status changes are audited: who, from, to and why, whichever interface moved the ticket."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.vocabulary import ActorKind
from tickets.accounts import create_person
from tickets.models import Ticket, TicketStatusChange
from tickets.services.actors import Actor
from tickets.services.lifecycle import set_ticket_status

pytestmark = pytest.mark.django_db


def test_a_status_change_is_audited_with_who_from_to_and_reason(ticket: Ticket) -> None:
    sally = create_person(username="sally", password="correct-horse-battery", role="supervisor")
    set_ticket_status(
        ticket=ticket,
        status="escalated",
        by=Actor(kind=ActorKind.SUPERVISOR, user=sally),
        reason="  buyer threatened a chargeback ",
    )
    change = TicketStatusChange.objects.get(ticket=ticket)
    assert (change.from_status, change.to_status) == ("open", "escalated")
    assert (change.actor_kind, change.actor) == ("supervisor", sally)
    assert change.reason == "buyer threatened a chargeback"
    assert ticket.status == "escalated"


def test_setting_the_status_a_ticket_already_has_writes_no_audit_row(ticket: Ticket) -> None:
    set_ticket_status(ticket=ticket, status="open", by=Actor(kind=ActorKind.AGENT))
    assert not TicketStatusChange.objects.exists()


def test_the_admins_status_edit_goes_through_the_audited_service(ticket: Ticket) -> None:
    User.objects.create_superuser("root", password="pw-root-123")
    client = Client()
    client.force_login(User.objects.get(username="root"))
    response = client.post(
        f"/admin/tickets/ticket/{ticket.pk}/change/",
        {"status": "resolved", "status_reason": "refund confirmed"},
    )
    assert response.status_code == 302
    change = TicketStatusChange.objects.get(ticket=ticket)
    assert (change.from_status, change.to_status, change.reason) == ("open", "resolved", "refund confirmed")
    assert change.actor is not None and change.actor.username == "root"
    assert Ticket.objects.get(pk=ticket.pk).status == "resolved"


def test_the_apis_status_patch_is_audited_with_the_agent(ticket: Ticket) -> None:
    from rest_framework.test import APIClient

    from tickets.accounts import create_agent

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='bot')}")
    response = client.patch(
        f"/api/v1/tickets/{ticket.ticket_id}/",
        {"status": "waiting", "reason": "asked for a photo"},
        format="json",
    )
    assert response.status_code == 200
    change = TicketStatusChange.objects.get(ticket=ticket)
    assert (change.actor_kind, change.actor.username if change.actor else None) == ("agent", "bot")
    assert change.reason == "asked for a photo"
