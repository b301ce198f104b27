"""The agent states its belief about the ticket's money and the desk checks it before the tool runs; the class's
caps refuse what would pass them, with the headroom; only the agent that reserved an intent (or a supervisor)
settles it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from core.errors import InvalidInput
from tests.desk.api.conftest import REFUND, post_action, url
from tests.factories import chat
from tickets.accounts import create_agent
from tickets.errors import NotIntentOwner
from tickets.models import ActorKind, RefusedAttempt, Ticket, TicketClass, TicketClassChange
from tickets.services.actions import record_action, settle_action
from tickets.services.actors import Actor
from tickets.services.classes import save_ticket_class
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db


def intend(agent: APIClient, ticket: Ticket, key: str, **override: Any) -> Any:
    return post_action(agent, ticket, key, **{**REFUND, "status": "intended", **override})


def settle(agent: APIClient, ticket: Ticket, action_id: str, **body: Any) -> Any:
    return agent.patch(url(ticket, f"actions/{action_id}"), body or {"status": "succeeded"}, format="json")


@pytest.fixture
def talked(ticket: Ticket) -> Ticket:
    chat(ticket, 4)
    return ticket


# ---------------------------------------------------------------- belief


def test_a_second_refund_in_other_words_passes_identity_and_is_stopped_by_the_belief(
    agent: APIClient, talked: Ticket
) -> None:
    first = intend(agent, talked, "r1", expects={"refunded_cents_total": 0})
    assert first.status_code == 201, first.json()
    assert settle(agent, talked, "A1").status_code == 200

    # The agent lost the refund from its context and describes the damage as the customer does.
    refused = intend(agent, talked, "r2", item="scratched leg", expects={"refunded_cents_total": 0})
    assert refused.status_code == 409
    body = refused.json()
    assert body["error"] == "belief_stale"
    assert (body["figure"], body["expected"], body["actual"]) == ("refunded_cents_total", 0, 4000)
    assert [a["id"] for a in body["actions"]] == ["A1"]
    assert "A1 issue_refund of 4000 cents for garden-table" in body["message"]
    assert RefusedAttempt.objects.get(ticket=talked, code="belief_stale").earlier_action_id == "A1"

    # Identity alone lets it through: other words for one thing are the belief check's job.
    assert intend(agent, talked, "r3", item="scratched leg").status_code == 201


def test_a_belief_is_stale_while_an_intent_that_would_move_the_figure_is_open(
    agent: APIClient, talked: Ticket
) -> None:
    assert intend(agent, talked, "r1").status_code == 201
    refused = intend(agent, talked, "r2", item="lamp", expects={"refunded_cents_total": 0})
    assert refused.status_code == 409 and refused.json()["actual"] == 0
    assert "not yet settled" in refused.json()["message"]


def test_a_belief_that_matches_passes_and_counts_of_the_tool_are_checked(
    agent: APIClient, talked: Ticket
) -> None:
    assert intend(agent, talked, "r1").status_code == 201 and settle(agent, talked, "A1").status_code == 200
    matching = intend(
        agent, talked, "r2", item="lamp", expects={"refunded_cents_total": 4000, "succeeded_count": 1}
    )
    assert matching.status_code == 201, matching.json()
    settle(agent, talked, "A2")
    stale = intend(agent, talked, "r3", item="vase", expects={"succeeded_count": 1})
    assert stale.status_code == 409
    assert (stale.json()["figure"], stale.json()["actual"]) == ("succeeded_count", 2)


@pytest.mark.parametrize(
    ("expects", "why"),
    [
        ({"refunded": 0}, "unknown figure 'refunded'"),
        ({"refunded_cents_total": -1}, "whole number"),
        ({"refunded_cents_total": "0"}, "whole number"),
        ({"refunded_cents_total": True}, "whole number"),
    ],
)
def test_a_malformed_belief_is_400(agent: APIClient, talked: Ticket, expects: Any, why: str) -> None:
    response = intend(agent, talked, "r1", expects=expects)
    assert response.status_code == 400 and why in response.json()["message"]


def test_a_class_can_require_the_belief_on_its_money_tools(agent: APIClient, talked: Ticket) -> None:
    klass = talked.ticket_class
    klass.require_belief = True
    save_ticket_class(ticket_class=klass, by=None)
    missing = intend(agent, talked, "r1")
    assert missing.status_code == 400 and missing.json()["error"] == "invalid"
    assert '"expects"' in missing.json()["message"]
    # A tool that moves no money needs none; with the belief, the refund goes through.
    assert intend(agent, talked, "c1", tool="cancel_subscription", item="plan").status_code == 201
    assert intend(agent, talked, "r2", expects={"refunded_cents_total": 0}).status_code == 201


# ---------------------------------------------------------------- caps


def set_caps(ticket_class: TicketClass, caps: dict[str, Any], by: User | None = None) -> None:
    ticket_class.money_caps = caps
    save_ticket_class(ticket_class=ticket_class, by=by)


def test_past_the_per_ticket_cap_is_refused_with_the_headroom(agent: APIClient, talked: Ticket) -> None:
    set_caps(talked.ticket_class, {"refund": {"per_ticket_cents": 5000}})
    assert intend(agent, talked, "r1").status_code == 201  # 4000, reserved: it counts against the cap
    refused = intend(agent, talked, "r2", item="lamp", amount_cents=2000)
    assert refused.status_code == 409
    body = refused.json()
    assert body["error"] == "cap_exceeded"
    assert (body["scope"], body["cap_cents"], body["used_cents"], body["headroom_cents"]) == (
        "ticket",
        5000,
        4000,
        1000,
    )
    assert "1000 cents of headroom" in body["message"]
    assert intend(agent, talked, "r3", item="lamp", amount_cents=1000).status_code == 201


def test_a_failed_intent_gives_its_headroom_back(agent: APIClient, talked: Ticket) -> None:
    set_caps(talked.ticket_class, {"refund": {"per_ticket_cents": 5000}})
    assert intend(agent, talked, "r1").status_code == 201
    assert settle(agent, talked, "A1", status="failed", reason="card declined").status_code == 200
    assert intend(agent, talked, "r2", item="lamp", amount_cents=5000).status_code == 201


def test_a_share_of_the_paid_amount_caps_when_the_ticket_carries_it(agent: APIClient, talked: Ticket) -> None:
    set_caps(talked.ticket_class, {"refund": {"share_of_paid": 0.5}})
    assert intend(agent, talked, "r1").status_code == 201  # the amount paid is unknown: no cap
    Ticket.objects.filter(pk=talked.pk).update(order_paid_cents=10000)
    refused = intend(agent, talked, "r2", item="lamp", amount_cents=1500)
    assert refused.status_code == 409
    assert (refused.json()["basis"], refused.json()["cap_cents"], refused.json()["headroom_cents"]) == (
        "share_of_paid",
        5000,
        1000,
    )


def test_the_per_order_cap_counts_every_ticket_of_the_order(
    agent: APIClient, talked: Ticket, standard_class: TicketClass
) -> None:
    set_caps(standard_class, {"refund": {"per_order_cents": 6000}})
    other = open_ticket(
        ticket_id="T-2", order_id=talked.order_id, seller_type="x", ticket_class=standard_class
    )
    chat(other, 2)
    assert intend(agent, talked, "r1").status_code == 201
    refused = intend(agent, other, "r2", item="lamp", amount_cents=3000)
    assert refused.status_code == 409
    assert (refused.json()["scope"], refused.json()["used_cents"], refused.json()["headroom_cents"]) == (
        "order",
        4000,
        2000,
    )
    elsewhere = open_ticket(
        ticket_id="T-3", order_id="SU-other", seller_type="x", ticket_class=standard_class
    )
    chat(elsewhere, 2)
    assert intend(agent, elsewhere, "r3", item="lamp", amount_cents=3000).status_code == 201


def test_credits_have_their_own_cap(agent: APIClient, talked: Ticket) -> None:
    set_caps(talked.ticket_class, {"credit": {"per_ticket_cents": 500}})
    assert intend(agent, talked, "r1").status_code == 201  # a refund: not capped here
    refused = intend(agent, talked, "c1", tool="issue_store_credit", item="goodwill", amount_cents=600)
    assert refused.status_code == 409 and refused.json()["effect"] == "credit"


def test_caps_are_audited_like_every_class_change_and_checked(standard_class: TicketClass) -> None:
    admin = User.objects.create_superuser("ada", password="x")
    set_caps(standard_class, {"refund": {"per_ticket_cents": 5000}}, by=admin)
    change = TicketClassChange.objects.filter(ticket_class=standard_class).first()
    assert change is not None and change.actor == admin
    assert change.changed_fields["money_caps"] == ({}, {"refund": {"per_ticket_cents": 5000}})
    with pytest.raises(InvalidInput, match="money caps must look like"):
        set_caps(standard_class, {"refund": {"per_ticket": 5000}})
    with pytest.raises(InvalidInput):
        set_caps(standard_class, {"charge": {"per_ticket_cents": 1}})


# ---------------------------------------------------------------- who settles


def test_only_the_agent_that_reserved_an_intent_settles_it(
    agent: APIClient, talked: Ticket, supervisor_user: User
) -> None:
    assert intend(agent, talked, "r1").status_code == 201
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-jones')}")
    refused = settle(other, talked, "A1")
    assert refused.status_code == 403 and refused.json()["error"] == "not_intent_owner"
    with pytest.raises(NotIntentOwner):
        settle_action(ticket=talked, action_id="A1", status="succeeded")  # the desk itself is not the owner
    assert settle(agent, talked, "A1").status_code == 200

    record_action(ticket=talked, tool="refund", item="lamp", idempotency_key="k2", status="intended",
                  by=Actor(kind=ActorKind.AGENT, user=User.objects.get(username="agent-jones")))  # fmt: skip
    settled = settle_action(
        ticket=talked, action_id="A2", status="failed", reason="the buyer cancelled",
        by=Actor(kind=ActorKind.SUPERVISOR, user=supervisor_user),
    )  # fmt: skip
    assert settled.changed and settled.body["action"]["status"] == "failed"
    assert "recorded_by_user_id" not in settled.body["action"]  # stored, not shown to the agent
