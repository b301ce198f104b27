"""POST /api/v1/tickets/{id}/actions/: idempotency keys, replays, and the repeat guard."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.desk.api.conftest import REFUND, post_action
from tests.factories import chat
from tickets.models import IdempotencyRecord, PinnedState, Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def talked(ticket: Ticket) -> Ticket:
    chat(ticket, 6)
    return ticket


def actions(ticket: Ticket) -> list:
    return PinnedState.objects.get(ticket=ticket).items.actions_taken


def test_recording_an_action_answers_201_with_the_action_and_the_refunded_total(
    agent: APIClient, talked: Ticket
) -> None:
    response = post_action(agent, talked, "rf-1", **REFUND, args={"order": "SU-1"})
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    body = response.json()
    assert body["action"]["id"] == "A1" and body["action"]["idempotency_key"] == "rf-1"
    assert body["action"]["args"] == {"order": "SU-1"}
    assert (body["state_version"], body["refunded_cents_total"]) == (2, 4000)


@pytest.mark.parametrize("key", [None, "", "has space", "ü-key", "x" * 256, '"unterminated'])
def test_a_missing_or_malformed_idempotency_key_is_answered_400(
    agent: APIClient, talked: Ticket, key: str | None
) -> None:
    response = post_action(agent, talked, key, **REFUND)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["message"]
    assert actions(talked) == []


def test_a_quoted_structured_field_key_is_the_same_key(agent: APIClient, talked: Ticket) -> None:
    assert post_action(agent, talked, '"rf-1"', **REFUND).status_code == 201
    assert post_action(agent, talked, "rf-1", **REFUND)["Idempotent-Replayed"] == "true"


def test_retrying_with_the_same_key_any_number_of_times_records_the_action_once(
    agent: APIClient, talked: Ticket
) -> None:
    first = post_action(agent, talked, "rf-1", **REFUND)
    retries = [post_action(agent, talked, "rf-1", **REFUND) for _ in range(5)]
    for retry in retries:
        assert retry.status_code == first.status_code == 201
        assert retry.json() == first.json()
        assert retry["Idempotent-Replayed"] == "true"
    assert len(actions(talked)) == 1
    assert IdempotencyRecord.objects.filter(ticket=talked).count() == 1


def test_the_same_key_with_another_body_is_answered_422(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND)
    response = post_action(agent, talked, "rf-1", **{**REFUND, "amount_cents": 5000})
    assert response.status_code == 422
    assert response.json()["error"] == "idempotency_key_reused"
    assert [a.amount_cents for a in actions(talked)] == [4000]


def test_a_second_refund_of_the_same_item_with_a_new_key_is_answered_409_naming_the_first(
    agent: APIClient, talked: Ticket
) -> None:
    post_action(agent, talked, "rf-1", **{**REFUND, "at_turn": 6})
    response = post_action(agent, talked, "rf-2", **{**REFUND, "at_turn": 6})
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "repeat_refused"
    assert "issue_refund of 4000 cents for garden-table at turn 6" in body["message"]
    assert {k: body["earlier_action"][k] for k in ("tool", "item", "amount_cents", "at_turn")} == {
        "tool": "issue_refund",
        "item": "garden-table",
        "amount_cents": 4000,
        "at_turn": 6,
    }
    assert len(actions(talked)) == 1


def test_a_deliberate_repeat_needs_a_reason_and_then_is_recorded(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND)
    no_reason = post_action(agent, talked, "rf-2", **REFUND, repeat_of_earlier=True)
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["message"]
    repeat = post_action(
        agent, talked, "rf-3", **REFUND, repeat_of_earlier=True, reason="second scratch found"
    )
    assert repeat.status_code == 201
    assert repeat.json()["action"]["repeat_of"] == "A1"
    assert repeat.json()["refunded_cents_total"] == 8000


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"amount_cents": -1}, "amount_cents"),
        ({"amount_cents": "4000"}, "amount_cents"),
        ({"amount_cents": True}, "amount_cents"),
        ({"reversible": "no"}, "reversible"),
        ({"at_turn": 0}, "at_turn"),
        ({"refund_id": "rf_5521"}, "refund_id"),
    ],
)
def test_a_malformed_action_is_answered_400_and_nothing_is_stored(
    agent: APIClient, talked: Ticket, override: dict, field: str
) -> None:
    response = post_action(agent, talked, "rf-1", **{**REFUND, **override})
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert actions(talked) == [] and not IdempotencyRecord.objects.exists()


def test_an_action_at_a_turn_that_does_not_exist_is_answered_400(agent: APIClient, talked: Ticket) -> None:
    response = post_action(agent, talked, "rf-1", **{**REFUND, "at_turn": 99})
    assert response.status_code == 400 and "at_turn 99" in response.json()["message"]
