"""GET /api/v1/tickets/{id}/history/: every change, newest first, paginated, with who and when."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from compaction.models import CompactionEvent
from compaction.reviews import compaction_review_record
from core.vocabulary import ActorKind, CompactionStatus
from desk.turns import receive_turn
from tests.desk.api.conftest import REFUND, post_action, post_state, url
from tickets.accounts import create_person
from tickets.models import Ticket, TicketClass
from tickets.services.actors import Actor
from tickets.services.lifecycle import open_ticket, set_ticket_status
from tickets.services.state_changes import correct_state

pytestmark = pytest.mark.django_db

# The ticket, the count, the page, one read per kind (six, reviews included), the pinned state: the token is
# cached (tickets.accounts.TokenCache) from the request before.
HISTORY_QUERIES = 10


def busy_ticket(agent: APIClient, rounds: int = 4, ticket_id: str = "T-H") -> Ticket:
    """A small-budget ticket with every kind of history entry: turns, state changes, actions intended,
    settled and recorded, a refused attempt, a status change, a supervisor's correction and compactions."""
    small, _ = TicketClass.objects.get_or_create(
        slug="tiny-1k",
        defaults={"token_budget": 1000, "compaction_threshold": 0.5, "keep_recent_tokens": 100},
    )
    ticket = open_ticket(ticket_id=ticket_id, order_id="SU-1", seller_type="marketplace", ticket_class=small)
    for n in range(rounds):
        agent.post(
            url(ticket, "turns"),
            {"role": "customer", "content": f"Round {n}: still broken. " * 8},
            format="json",
        )
        agent.post(
            url(ticket, "turns"),
            {"role": "agent", "content": f"Round {n}: checking. " * 8, "boundary": "reply_sent"},
            format="json",
        )
    assert post_state(agent, ticket, '"1"', op="constraint_stated", text="no replacement").status_code == 200
    assert post_action(agent, ticket, "rf-1", **REFUND, status="intended").status_code == 201
    assert agent.patch(url(ticket, "actions/A1"), {"status": "succeeded"}, format="json").status_code == 200
    assert post_action(agent, ticket, "rf-2", **{**REFUND, "item": "Garden_Table"}).status_code == 409
    assert (
        post_action(agent, ticket, "lk-1", tool="lookup_order", item="SU-1", reversible=True).status_code
        == 201
    )
    sally = create_person(username=f"sally-{ticket_id}", password="correct-horse-battery", role="supervisor")
    ticket.refresh_from_db()
    correct_state(
        ticket=ticket,
        by=Actor(kind=ActorKind.SUPERVISOR, user=sally),
        reason="the lookup was a mistake",
        expected_version=ticket.pinned_state.version,
        op="action_reversed",
        target_id="A2",
    )
    correct_state(
        ticket=ticket,
        by=Actor(kind=ActorKind.SUPERVISOR, user=sally),
        reason="said on the phone",
        expected_version=ticket.pinned_state.version + 1,
        op="constraint_stated",
        text="deliver after 5pm",
    )
    event = CompactionEvent.objects.filter(ticket=ticket).order_by("number").first()
    assert event is not None
    compaction_review_record(event=event, by=sally, verdict="summary_bad", comment="dropped the refund")
    set_ticket_status(ticket=ticket, status="waiting", by=Actor(kind=ActorKind.SUPERVISOR, user=sally))
    receive_turn(ticket=ticket, role="customer", content="any news?")
    return ticket


def history(client: APIClient, ticket: Ticket, **params: Any) -> dict[str, Any]:
    response = client.get(url(ticket, "history"), params)
    assert response.status_code == 200, response.json()
    return response.json()


def test_every_kind_of_change_appears_with_who_and_when(agent: APIClient) -> None:
    ticket = busy_ticket(agent)
    assert CompactionEvent.objects.filter(ticket=ticket).exists()
    entries = history(agent, ticket, page_size=200)["results"]
    assert {e["kind"] for e in entries} == {
        "turn",
        "state_change",
        "action",
        "correction",
        "refused_attempt",
        "status_change",
        "compaction",
        "review",
    }

    events = [e["detail"]["event"] for e in entries if e["kind"] == "action"]
    assert {"intended", "settled", "recorded", "reversed"} <= set(events)
    reversed_entry = next(e for e in entries if e["kind"] == "action" and e["detail"]["event"] == "reversed")
    assert reversed_entry["by"] == {"kind": "supervisor", "username": "sally-T-H"}
    assert reversed_entry["detail"]["reason"] == "the lookup was a mistake"

    refused = next(e for e in entries if e["kind"] == "refused_attempt")
    assert refused["by"] == {"kind": "agent", "username": "agent-smith"}
    assert refused["detail"]["item"] == "Garden_Table" and refused["detail"]["earlier_action_id"] == "A1"
    assert refused["detail"]["earlier_action"]["amount_cents"] == 4000

    status = next(e for e in entries if e["kind"] == "status_change")
    assert (status["detail"]["from"], status["detail"]["to"]) == ("open", "waiting")

    settled = next(e for e in entries if e["kind"] == "action" and e["detail"]["event"] == "settled")
    assert settled["detail"]["action"]["status"] == "succeeded" and settled["detail"]["subject_id"] == "A1"
    posted = [e["by"] for e in entries if e["kind"] == "turn"]
    assert {"kind": "agent", "username": "agent-smith"} in posted  # through the API
    assert {"kind": "system", "username": None} in posted  # received by the desk itself
    correction = next(e for e in entries if e["kind"] == "correction")
    assert correction["detail"]["op"] == "constraint_stated" and correction["by"]["username"] == "sally-T-H"
    compaction = next(e for e in entries if e["kind"] == "compaction")
    assert compaction["by"]["kind"] == "system" and compaction["detail"]["status"]
    review = next(e for e in entries if e["kind"] == "review")
    first = CompactionEvent.objects.filter(ticket=ticket).order_by("number").first()
    assert first is not None
    assert review["by"] == {"kind": "supervisor", "username": "sally-T-H"}
    assert review["detail"] == {
        "compaction": first.number,
        "compaction_status": first.status,
        "compaction_at_turn": first.at_turn,
        "verdict": "summary_bad",
        "comment": "dropped the refund",
    }
    assert review["summary"] == f"compaction {first.number} reviewed: summary bad (dropped the refund)"


def test_the_history_is_newest_first_and_pages_cover_it_once(agent: APIClient) -> None:
    ticket = busy_ticket(agent)
    whole = history(agent, ticket, page_size=200)
    times = [e["at"] for e in whole["results"]]
    assert times == sorted(times, reverse=True)
    assert (whole["results"][0]["kind"], whole["results"][0]["detail"]["role"]) == ("turn", "customer")
    assert whole["results"][-1]["detail"]["op"] == "opened"
    assert whole["count"] == len(whole["results"])

    paged: list[dict[str, Any]] = []
    body = history(agent, ticket, page_size=7)
    assert body["previous"] is None
    while True:
        paged.extend(body["results"])
        if body["next"] is None:
            break
        response = agent.get(body["next"])
        assert response.status_code == 200
        body = response.json()
        assert body["previous"] is not None
    assert paged == whole["results"]
    assert body["page"] == -(-whole["count"] // 7)


@pytest.mark.parametrize("params", [{"page": "0"}, {"page": "x"}, {"page_size": "201"}, {"page": ""}])
def test_a_bad_page_is_answered_400(agent: APIClient, ticket: Ticket, params: dict[str, str]) -> None:
    response = agent.get(url(ticket, "history"), params)
    assert response.status_code == 400 and response.json()["error"] == "invalid"


def test_a_page_past_the_end_is_empty(agent: APIClient, ticket: Ticket) -> None:
    body = history(agent, ticket, page=5)
    assert body["results"] == [] and body["next"] is None and body["count"] == 1  # the ticket opened


def test_an_unknown_ticket_has_no_history(agent: APIClient) -> None:
    assert agent.get("/api/v1/tickets/T-NOPE/history/").status_code == 404


def test_a_history_page_costs_a_constant_number_of_queries(
    agent: APIClient, django_assert_num_queries
) -> None:
    short, long = (
        busy_ticket(agent, rounds=4, ticket_id="T-S"),
        busy_ticket(agent, rounds=12, ticket_id="T-L"),
    )
    assert CompactionEvent.objects.filter(ticket=long, status=CompactionStatus.APPLIED).count() >= 2
    assert agent.get(url(short, "state")).status_code == 200  # the token read once more, and kept
    for ticket in (short, long):
        with django_assert_num_queries(HISTORY_QUERIES):
            body = history(agent, ticket, page_size=200)
        assert len({e["kind"] for e in body["results"]}) == 8  # every kind read, whatever the length
    assert body["count"] > 40  # the long one: many more rows than the short one, the same queries
