"""Agent tokens scoped to ticket classes: a token narrowed to some classes reaches only their tickets (403
class_not_allowed, JSON, nothing written, for every endpoint family); a token with no classes reaches all, as
tokens did before scopes existed."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.desk.api.conftest import REFUND, post_action, post_state, post_turn, url
from tickets.accounts import authenticate_agent_token, create_agent, create_person
from tickets.models import AgentToken, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def classes() -> tuple[TicketClass, TicketClass]:
    refunds = TicketClass.objects.create(slug="refunds-8k", token_budget=8000, compaction_threshold=0.8)
    vip = TicketClass.objects.create(slug="vip-16k", token_budget=16000, compaction_threshold=0.8)
    return refunds, vip


@pytest.fixture
def tickets(classes: tuple[TicketClass, TicketClass]) -> tuple[Ticket, Ticket]:
    refunds, vip = classes
    mine = open_ticket(ticket_id="T-MINE", order_id="SU-1", seller_type="marketplace", ticket_class=refunds)
    other = open_ticket(ticket_id="T-VIP", order_id="SU-2", seller_type="marketplace", ticket_class=vip)
    for ticket in (mine, other):
        Turn.objects.create(ticket=ticket, number=1, role="customer", content="hello", tokens=5)
        Ticket.objects.filter(pk=ticket.pk).update(turn_count=1)
    return mine, other


def client_for(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def scoped(classes: tuple[TicketClass, TicketClass]) -> APIClient:
    return client_for(create_agent(name="refunds-bot", classes=["refunds-8k"]))


@pytest.fixture
def unscoped(classes: tuple[TicketClass, TicketClass]) -> APIClient:
    return client_for(create_agent(name="any-bot"))


def refused(response: Any, ticket_id: str = "T-VIP") -> None:
    assert response.status_code == 403, response.content
    body = response.json()
    assert body["error"] == "class_not_allowed"
    assert "vip-16k" in body["message"] and body["ticket_class"] == "vip-16k"
    if ticket_id:
        assert ticket_id in body["message"]


def an_intent(ticket: Ticket) -> str:
    recorded = record_action(
        ticket=ticket,
        tool="issue_refund",
        item="garden-table",
        amount_cents=4000,
        at_turn=1,
        status="intended",
        idempotency_key="k-intent",
    )
    return recorded.body["action"]["id"]


def test_the_scope_is_resolved_with_the_token_in_its_one_query(
    classes: tuple[TicketClass, TicketClass], django_assert_num_queries: Any
) -> None:
    key = create_agent(name="two-class-bot", classes=["refunds-8k", "vip-16k"])
    plain = create_agent(name="plain-bot")
    AgentToken.objects.update(last_used_at=timezone.now())  # no last_used_at write inside the count
    with django_assert_num_queries(1):  # the token, its roles and its classes
        agent = authenticate_agent_token(key=key)
    assert agent is not None
    assert agent.token.class_scope() == frozenset(c.pk for c in classes)
    plain_agent = authenticate_agent_token(key=plain)
    assert plain_agent is not None and plain_agent.token.class_scope() is None


def test_turns_state_actions_and_status_of_another_class_are_refused_and_nothing_is_written(
    tickets: tuple[Ticket, Ticket], scoped: APIClient
) -> None:
    mine, other = tickets
    refused(post_turn(scoped, other, role="customer", content="hi"))
    refused(post_state(scoped, other, '"1"', op="constraint_stated", text="no voucher", at_turn=1))
    refused(scoped.get(url(other, "state")))
    refused(post_action(scoped, other, "k-1", **REFUND))
    refused(scoped.patch(url(other), {"status": "resolved", "reason": "done"}, format="json"))
    refused(scoped.get(url(other)))
    other.refresh_from_db()
    assert other.turn_count == 1 and other.status == "open" and other.pinned_state.version == 1
    # Its own class: every one of them works.
    assert post_turn(scoped, mine, role="customer", content="hi").status_code == 201
    assert (
        post_state(scoped, mine, '"1"', op="constraint_stated", text="no voucher", at_turn=1).status_code
        == 200
    )
    assert post_action(scoped, mine, "k-1", **REFUND).status_code == 201
    assert scoped.patch(url(mine), {"status": "waiting"}, format="json").status_code == 200


def test_settling_an_intent_of_another_class_is_refused(
    tickets: tuple[Ticket, Ticket], scoped: APIClient
) -> None:
    _, other = tickets
    action_id = an_intent(other)
    response = scoped.patch(url(other, f"actions/{action_id}"), {"status": "succeeded"}, format="json")
    refused(response)
    other.pinned_state.refresh_from_db()
    assert other.pinned_state.action_rows.get(number=1).data["status"] == "intended"


def test_reads_context_history_compactions_and_handoffs_of_another_class_are_refused(
    tickets: tuple[Ticket, Ticket], scoped: APIClient
) -> None:
    mine, other = tickets
    for what in ("context", "history", "compactions"):
        refused(scoped.get(url(other, what)))
        assert scoped.get(url(mine, what)).status_code == 200, what
    handoff = {"from_agent": "refunds-bot", "to_agent": "vip-bot", "given": {}}
    refused(scoped.post(url(other, "handoffs"), handoff, format="json"))
    assert scoped.post(url(mine, "handoffs"), handoff, format="json").status_code == 201


def test_opening_a_ticket_of_another_class_is_refused(
    tickets: tuple[Ticket, Ticket], scoped: APIClient
) -> None:
    body = {"ticket_id": "T-NEW", "order_id": "SU-3", "seller_type": "marketplace", "ticket_class": "vip-16k"}
    response = scoped.post("/api/v1/tickets/", body, format="json")
    refused(response, ticket_id="")
    assert not Ticket.objects.filter(ticket_id="T-NEW").exists()
    assert (
        scoped.post("/api/v1/tickets/", {**body, "ticket_class": "refunds-8k"}, format="json").status_code
        == 201
    )


def test_an_unknown_ticket_is_still_404_for_a_scoped_token(
    tickets: tuple[Ticket, Ticket], scoped: APIClient
) -> None:
    response = scoped.get(url("T-NOPE"))
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_a_token_with_no_classes_acts_on_every_class(
    tickets: tuple[Ticket, Ticket], unscoped: APIClient
) -> None:
    for ticket in tickets:
        assert post_turn(unscoped, ticket, role="customer", content="hi").status_code == 201
        assert unscoped.get(url(ticket, "context")).status_code == 200


def test_an_admin_narrowing_a_token_takes_effect_on_its_next_request(
    tickets: tuple[Ticket, Ticket], classes: tuple[TicketClass, TicketClass], unscoped: APIClient
) -> None:
    _, other = tickets
    assert unscoped.get(url(other)).status_code == 200
    token = AgentToken.objects.get(user__username="any-bot")
    token.ticket_classes.set([classes[0]])
    refused(unscoped.get(url(other)))
    token.ticket_classes.clear()  # back to every class
    assert unscoped.get(url(other)).status_code == 200


def test_create_agent_takes_repeatable_classes_and_refuses_unknown_ones(
    classes: tuple[TicketClass, TicketClass],
) -> None:
    out = StringIO()
    call_command("create_agent", "scoped-bot", "--class", "refunds-8k", "--class", "vip-16k", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert "scoped to refunds-8k, vip-16k" in lines[0]
    token = AgentToken.objects.get(user__username="scoped-bot")
    assert set(token.ticket_classes.values_list("slug", flat=True)) == {"refunds-8k", "vip-16k"}
    assert lines[-1].startswith("sd_")

    with pytest.raises(CommandError, match="no ticket class 'vip'"):
        call_command("create_agent", "typo-bot", "--class", "vip", stdout=StringIO())
    assert not User.objects.filter(username="typo-bot").exists()  # nothing half-written

    out = StringIO()
    call_command("create_agent", "all-bot", stdout=out)
    assert "scoped to every class" in out.getvalue()
    assert not AgentToken.objects.get(user__username="all-bot").ticket_classes.exists()


def test_an_admin_narrows_a_token_in_the_admin(
    tickets: tuple[Ticket, Ticket], classes: tuple[TicketClass, TicketClass]
) -> None:
    _, other = tickets
    key = create_agent(name="wide-bot")
    token = AgentToken.objects.get(user__username="wide-bot")
    admin = Client()
    admin.force_login(create_person(username="ada", password="correct-horse-battery", role="admin"))
    page = f"/admin/tickets/agenttoken/{token.pk}/change/"
    assert 'name="ticket_classes"' in admin.get(page).content.decode()
    response = admin.post(page, {"ticket_classes": [classes[0].pk]})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(token.ticket_classes.values_list("slug", flat=True)) == ["refunds-8k"]
    token.refresh_from_db()
    assert token.revoked_at is None and token.prefix == key[:12]  # nothing else changed
    refused(client_for(key).get(url(other)))
