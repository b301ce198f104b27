"""Nobody can delete a turn, an action (they live in the pinned state), a snapshot or an audit row."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tickets.models import PinnedState, StateChange, Ticket, Turn
from tickets.services import append_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_logged_in() -> Client:
    User.objects.create_superuser("root", password="pw-root-123")
    client = Client()
    client.login(username="root", password="pw-root-123")
    return client


def test_even_a_superuser_cannot_delete_or_edit_history(
    admin_client_logged_in: Client, ticket: Ticket
) -> None:
    append_turn(ticket=ticket, role="customer", content="hello")
    turn = Turn.objects.get(ticket=ticket)
    change = StateChange.objects.get(ticket=ticket)
    state = PinnedState.objects.get(ticket=ticket)
    for url in (
        f"/admin/tickets/turn/{turn.pk}/delete/",
        f"/admin/tickets/statechange/{change.pk}/delete/",
        f"/admin/tickets/pinnedstate/{state.pk}/delete/",
        f"/admin/tickets/ticket/{ticket.pk}/delete/",
    ):
        assert admin_client_logged_in.post(url, {"post": "yes"}).status_code == 403, url
    # The change form is view-only: posting an edit is refused too.
    assert (
        admin_client_logged_in.post(
            f"/admin/tickets/turn/{turn.pk}/change/", {"content": "rewritten"}
        ).status_code
        == 403
    )
    assert Turn.objects.get(pk=turn.pk).content == "hello"
    assert StateChange.objects.filter(pk=change.pk).exists()


def test_a_superuser_can_view_the_audit_log(admin_client_logged_in: Client, ticket: Ticket) -> None:
    response = admin_client_logged_in.get("/admin/tickets/statechange/")
    assert response.status_code == 200
    assert b"T-1" in response.content
