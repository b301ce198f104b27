"""The guard compares what an action does, not what it is called (issue 24): after a settled $40 issue_refund
for garden-table, every way a careless or hostile agent tried to refund it again is a 409 naming A1.

Each attempt is a fresh intent with a fresh key, as in the issue's 77 attempts.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.desk.api.conftest import REFUND, post_action
from tests.factories import chat
from tickets.models import PinnedState, RefusedAttempt, Ticket

pytestmark = pytest.mark.django_db

# The class's own catalog calls these refunds; the last four are outside it (their names say refund or credit).
OTHER_REFUND_TOOLS = [
    "refund",
    "partial_refund",
    "issue_partial_refund",
    "refund_item",
    "refund_order",
    "return_delivered_order_items",
    "issueRefund",
    "stripe.refund",
    "refunds.create",
    "issue_store_credit",
]
# Item spellings a model really emits.
SPELLINGS = [
    "garden\u2011table",  # non-breaking hyphen (GPT models emit it often)
    "garden\u2010table",  # hyphen
    "garden\u2013table",  # en dash
    "garden\u2014table",  # em dash
    "garden\u2212table",  # minus sign
    "garden-table.",
    "the garden table",
    "garden-tables",
    "the garden tables",
    "table (garden)",
    "garden-table (SU-87310)",
    "garden-table #1",
    "garden/table",
    "gardentable",
    "",  # empty: the whole order
]


@pytest.fixture
def refunded(agent: APIClient, ticket: Ticket) -> Ticket:
    """issue_refund of 4000 cents for garden-table, reserved and settled as succeeded."""
    chat(ticket, 4)
    assert post_action(agent, ticket, "first", **REFUND, status="intended").status_code == 201
    settled = agent.patch(
        f"/api/v1/tickets/{ticket.ticket_id}/actions/A1/", {"status": "succeeded"}, format="json"
    )
    assert settled.status_code == 200
    return ticket


def attempt(agent: APIClient, ticket: Ticket, key: str, **override: Any) -> Any:
    body = {**REFUND, "status": "intended", **override}
    return post_action(agent, ticket, key, **{k: v for k, v in body.items() if v is not None})


def assert_refused_naming_a1(response: Any) -> dict[str, Any]:
    assert response.status_code == 409, response.json()
    body = response.json()
    assert body["error"] == "repeat_refused"
    assert body["earlier_action"]["id"] == "A1"
    assert "A1" in body["message"] and "issue_refund of 4000 cents for garden-table" in body["message"]
    return body


@pytest.mark.parametrize("tool", OTHER_REFUND_TOOLS)
def test_another_refund_tool_on_the_refunded_item_is_a_repeat(
    agent: APIClient, refunded: Ticket, tool: str
) -> None:
    assert_refused_naming_a1(attempt(agent, refunded, f"k-{tool}", tool=tool))


@pytest.mark.parametrize("tool", ["issueRefund", "stripe.refund", "refunds.create"])
def test_a_tool_outside_the_catalog_whose_name_says_refund_is_money_and_the_refusal_says_so(
    agent: APIClient, refunded: Ticket, tool: str
) -> None:
    body = assert_refused_naming_a1(attempt(agent, refunded, f"k-{tool}", tool=tool))
    assert body["tool_classified"] is False and body["money_effect"] == "refund"
    assert (
        "not in this class's catalog" in body["message"] and "until an admin classifies it" in body["message"]
    )


@pytest.mark.parametrize("item", SPELLINGS)
def test_every_spelling_of_the_item_is_the_same_item(agent: APIClient, refunded: Ticket, item: str) -> None:
    assert_refused_naming_a1(attempt(agent, refunded, f"k-{SPELLINGS.index(item)}", item=item))


def test_an_omitted_item_means_the_whole_order(agent: APIClient, refunded: Ticket) -> None:
    body = {k: v for k, v in {**REFUND, "status": "intended"}.items() if k != "item"}
    response = post_action(agent, refunded, "k-omitted", **body)
    assert "whole order" in assert_refused_naming_a1(response)["message"]


def test_the_item_only_in_the_arguments_is_found(agent: APIClient, refunded: Ticket) -> None:
    args = {"order_id": "#W2611340", "item_ids": ["Garden Table"], "payment_method_id": "card_1"}
    assert_refused_naming_a1(
        attempt(agent, refunded, "k-args", tool="return_delivered_order_items", item="", args=args)
    )


@pytest.mark.parametrize("reason", [".", "\u200b", "  ", "-", "!!", "1"])
def test_a_deliberate_repeat_needs_a_reason_with_words(
    agent: APIClient, refunded: Ticket, reason: str
) -> None:
    response = attempt(
        agent, refunded, f"k-{len(reason)}-{ord(reason[0])}", repeat_of_earlier=True, reason=reason
    )
    if not reason.strip():
        assert response.status_code == 400 and response.json()["error"] == "invalid"
        return
    assert "has no words in it" in assert_refused_naming_a1(response)["message"]


def test_every_other_tool_with_every_spelling_is_refused_and_no_money_moves(
    agent: APIClient, refunded: Ticket
) -> None:
    """The cross product: 10 tools x 15 spellings, each refused naming A1, each refusal kept."""
    before = RefusedAttempt.objects.filter(ticket=refunded).count()
    pairs = list(itertools.product(OTHER_REFUND_TOOLS, SPELLINGS))
    for n, (tool, item) in enumerate(pairs):
        assert_refused_naming_a1(attempt(agent, refunded, f"x-{n}", tool=tool, item=item))
    assert RefusedAttempt.objects.filter(ticket=refunded).count() == before + len(pairs)
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=refunded)
    assert [a.id for a in pinned.items.actions_taken] == ["A1"]
    assert pinned.agent_json()["refunded_cents_total"] == 4000


# ---------------------------------------------------------------- what is not a repeat


def test_a_refund_of_another_item_and_a_charge_of_the_same_item_go_through(
    agent: APIClient, refunded: Ticket
) -> None:
    assert attempt(agent, refunded, "lamp", item="floor lamp").status_code == 201
    assert attempt(agent, refunded, "charge", tool="charge_card", item="garden-table").status_code == 201


def test_arguments_naming_another_item_are_that_item_not_the_whole_order(
    agent: APIClient, refunded: Ticket
) -> None:
    args = {"item_ids": ["floor lamp"]}
    response = attempt(agent, refunded, "k-lamp", tool="return_delivered_order_items", item="", args=args)
    assert response.status_code == 201
    assert response.json()["action"]["item"] == ""  # the stored action keeps what the agent sent


def test_a_deliberate_repeat_with_a_reason_in_words_is_recorded(agent: APIClient, refunded: Ticket) -> None:
    response = attempt(
        agent, refunded, "again", tool="refund", repeat_of_earlier=True, reason="the buyer was charged twice"
    )
    assert response.status_code == 201
    assert response.json()["action"]["repeat_of"] == "A1"


def test_the_stored_action_keeps_the_spelling_the_agent_sent(agent: APIClient, ticket: Ticket) -> None:
    chat(ticket, 2)
    response = attempt(agent, ticket, "k1", tool="stripe.refund", item="the garden tables (SU-87310)")
    assert response.status_code == 201
    assert response.json()["action"]["item"] == "the garden tables (SU-87310)"
    assert response.json()["action"]["tool"] == "stripe.refund"


def test_a_tool_classified_as_no_money_is_compared_by_its_name(agent: APIClient, refunded: Ticket) -> None:
    klass = refunded.ticket_class
    klass.money_tools = {**klass.money_tools, "refunds.lookup": None}
    klass.irreversible_tools = [*klass.irreversible_tools, "refunds.lookup"]
    klass.save()
    assert attempt(agent, refunded, "look", tool="refunds.lookup").status_code == 201
