"""T-40118 played through the HTTP API, the way a live agent would: turns, then the events of each turn."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.desk.api.conftest import post_action, post_state, post_turn, url
from tickets.models import PinnedState, TicketClass

pytestmark = pytest.mark.django_db

TURN_FIELDS = ("role", "content", "tool", "args", "tool_call_id", "boundary")


def play(agent: APIClient, scenario: dict[str, Any]) -> dict[str, Any]:
    """Drive every turn and event through the endpoints; return what the API answered along the way."""
    spec = scenario["ticket_class"]
    TicketClass.objects.create(
        slug=spec["slug"],
        token_budget=spec["token_budget"],
        compaction_threshold=spec["compaction_threshold"],
    )
    opened = agent.post(
        "/api/v1/tickets/",
        {
            "ticket_id": scenario["ticket_id"],
            "order_id": scenario["order_id"],
            "seller_type": scenario["seller_type"],
            "ticket_class": spec["slug"],
            "system_prompt": scenario["system_prompt"],
        },
        format="json",
    )
    assert opened.status_code == 201, opened.json()
    ticket_id = scenario["ticket_id"]
    seen: dict[str, Any] = {"compactions": {}, "actions": [], "refused": []}
    for number, turn in enumerate(scenario["turns"], start=1):
        # The import format keeps unknown keys ("note", "expect"); the API refuses them, so send only a turn's fields.
        body = {name: turn[name] for name in TURN_FIELDS if name in turn}
        appended = post_turn(agent, ticket_id, **body)
        assert appended.status_code == 201, appended.json()
        assert appended.json()["turn"] == number
        if appended.json()["compaction"]["status"] != "not_due":
            seen["compactions"][number] = appended.json()["compaction"]
        for event in turn.get("events", []):
            if event["type"] == "action_taken":
                fields = ("tool", "item", "amount_cents", "at_turn", "reversible", "args")
                answer = post_action(
                    agent, ticket_id, event["idempotency_key"], **{k: event[k] for k in fields if k in event}
                )
                (seen["refused"] if event.get("expect_refused") else seen["actions"]).append(answer)
            else:
                state = agent.get(url(ticket_id, "state"))
                body = {"op": event["type"], "text": event["text"], "at_turn": event.get("at_turn", number)}
                changed = post_state(agent, ticket_id, state["ETag"], **body)
                assert changed.status_code == 200, changed.json()
    return seen


def test_t40118_through_the_api_ends_with_one_refund_and_the_repeat_refused_naming_turn_6(
    agent: APIClient, scenario: dict[str, Any]
) -> None:
    """The double refund of the seed is stopped at the API even though its idempotency key is new."""
    seen = play(agent, scenario)

    assert [a.status_code for a in seen["actions"]] == [201]
    [refused] = seen["refused"]
    assert refused.status_code == 409
    body = refused.json()
    assert body["error"] == "repeat_refused"
    assert "turn 6" in body["message"]
    earlier = body["earlier_action"]
    assert (earlier["tool"], earlier["item"], earlier["amount_cents"], earlier["at_turn"]) == (
        "issue_refund",
        "garden-table",
        4000,
        6,
    )

    state = agent.get(url("T-40118", "state")).json()
    assert len(state["actions_taken"]) == 1
    assert state["refunded_cents_total"] == 4000
    assert PinnedState.objects.get(ticket__ticket_id="T-40118").items.refunded_cents_total == 4000


def test_t40118_through_the_api_defers_at_turn_21_and_applies_compaction_after_turn_22(
    agent: APIClient, scenario: dict[str, Any]
) -> None:
    """Due mid-decision at 21 (a tool result waits for its reasoning), applied at the boundary of 22."""
    seen = play(agent, scenario)

    assert {n: c["status"] for n, c in seen["compactions"].items()} == {21: "deferred", 22: "applied"}
    applied = seen["compactions"][22]
    assert applied["tokens_after"] < applied["tokens_before"]
    assert applied["coverage_missing"] == []

    events = agent.get(url("T-40118", "compactions")).json()
    assert [(e["at_turn"], e["status"]) for e in events] == [(21, "deferred"), (22, "applied")]
    assert events[1]["replaced_turns"] == applied["replaced_turns"]

    context = agent.get(url("T-40118", "context")).json()
    assert context["summary"] is not None
    assert context["turns"][0]["number"] == applied["replaced_turns"][1] + 1
    assert context["pinned_state"]["refunded_cents_total"] == 4000
