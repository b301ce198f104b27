"""Intents, the repeat guard over normalized identities, the money totals, and refusals kept.

POST .../actions/ with "status": "intended" reserves an action before its tool runs; PATCH .../actions/{id}/
settles it. The ticket already has `issue_refund` of 4000 cents for `garden-table` where a test says so.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from desk.api.serializers import ActionRecordedOut
from tests.desk.api.conftest import REFUND, post_action, url
from tests.factories import chat
from tickets.models import IdempotencyRecord, PinnedState, RefusedAttempt, StateChange, Ticket
from tickets.selectors import refused_attempts_count
from tickets.services.actions import record_action
from tickets.services.classes import save_ticket_class

pytestmark = pytest.mark.django_db


@pytest.fixture
def talked(ticket: Ticket) -> Ticket:
    chat(ticket, 6)
    return ticket


@pytest.fixture
def refunded(agent: APIClient, talked: Ticket) -> Ticket:
    """A ticket with issue_refund of 4000 cents for garden-table at turn 6."""
    response = post_action(agent, talked, "rf-1", **{**REFUND, "at_turn": 6})
    assert response.status_code == 201
    return talked


def state(ticket: Ticket) -> dict[str, Any]:
    return PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket).agent_json()


def settle(client: APIClient, ticket: Ticket, action_id: str, **body: Any) -> Any:
    return client.patch(url(ticket, f"actions/{action_id}"), body, format="json")


# ---------------------------------------------------------------- every bypass of the issue is now 409


@pytest.mark.parametrize(
    "override",
    [
        {"item": "Garden-Table"},
        {"item": "garden\u200b-table"},
        {"item": "garden_table"},
        {"tool": "Issue_Refund"},
        {"tool": "issue-refund"},
        {"reversible": True},
        {"tool": "ISSUE REFUND", "item": " garden  table ", "reversible": True},
    ],
    ids=["Garden-Table", "zero-width", "garden_table", "Issue_Refund", "issue-refund", "reversible", "all"],
)
def test_a_second_refund_however_spelled_is_refused_naming_the_first(
    agent: APIClient, refunded: Ticket, override: dict[str, Any]
) -> None:
    response = post_action(agent, refunded, "rf-2", **{**REFUND, "at_turn": 6, **override})
    assert response.status_code == 409, response.json()
    body = response.json()
    assert body["error"] == "repeat_refused"
    assert "issue_refund of 4000 cents for garden-table at turn 6" in body["message"]
    assert (body["earlier_action"]["id"], body["earlier_action"]["amount_cents"]) == ("A1", 4000)
    current = state(refunded)
    assert len(current["actions_taken"]) == 1 and current["refunded_cents_total"] == 4000


def test_the_stored_action_keeps_what_the_agent_sent(agent: APIClient, talked: Ticket) -> None:
    response = post_action(
        agent, talked, "rf-1", **{**REFUND, "tool": "Issue_Refund", "item": "Garden-Table"}
    )
    assert response.status_code == 201
    action = state(talked)["actions_taken"][0]
    assert (action["tool"], action["item"]) == ("Issue_Refund", "Garden-Table")
    assert state(talked)["refunded_cents_total"] == 4000


def test_reversible_true_cannot_make_a_listed_tool_reversible(agent: APIClient, talked: Ticket) -> None:
    response = post_action(agent, talked, "rf-1", **{**REFUND, "reversible": True})
    assert response.json()["action"]["reversible"] is False


def test_an_unlisted_tool_the_agent_calls_reversible_is_not_guarded(agent: APIClient, talked: Ticket) -> None:
    body = {"tool": "track_parcel", "item": "parcel-1", "reversible": True}
    assert post_action(agent, talked, "t-1", **body).status_code == 201
    assert post_action(agent, talked, "t-2", **body).status_code == 201


def test_an_unlisted_tool_sent_without_reversible_is_still_guarded(agent: APIClient, talked: Ticket) -> None:
    """As before intents: an action is irreversible unless the agent says otherwise."""
    assert post_action(agent, talked, "w-1", tool="wire_payout", item="seller-7").status_code == 201
    assert post_action(agent, talked, "w-2", tool="Wire-Payout", item="Seller 7").status_code == 409


def test_the_same_tool_on_another_item_is_not_a_repeat(agent: APIClient, refunded: Ticket) -> None:
    response = post_action(agent, refunded, "rf-2", **{**REFUND, "item": "garden-parasol"})
    assert response.status_code == 201


# ---------------------------------------------------------------- totals


def test_only_refund_tools_count_in_the_refunded_total(agent: APIClient, refunded: Ticket) -> None:
    """The issue's 34,500 where 4,000 was refunded: a lookup and a fee are not refunds."""
    post_action(agent, refunded, "lk-1", tool="lookup_order", item="SU-1", amount_cents=5000, reversible=True)
    post_action(agent, refunded, "fee-1", tool="apply_restocking_fee", item="garden-table", amount_cents=1500)
    post_action(agent, refunded, "cert-1", tool="send_certificate", item="user-1", amount_cents=2500)
    post_action(agent, refunded, "bk-1", tool="book_reservation", item="HATHAT", amount_cents=30000)
    current = state(refunded)
    assert current["refunded_cents_total"] == 4000
    assert current["credited_cents_total"] == 2500
    assert current["charged_cents_total"] == 30000


def test_the_totals_follow_the_class_catalog(agent: APIClient, talked: Ticket) -> None:
    klass = talked.ticket_class
    # issue_refund's name says refund: the class says it moves no money (null), so it does not count.
    klass.money_tools = {"goodwill_*": "refund", "issue_refund": None}
    klass.save()
    post_action(agent, talked, "g-1", tool="Goodwill-Payment", item="x", amount_cents=700)
    post_action(agent, talked, "r-1", **REFUND)
    assert state(talked)["refunded_cents_total"] == 700


def test_intended_and_failed_actions_do_not_count_and_a_reversed_refund_stops_counting(
    agent: APIClient, supervisor: APIClient, talked: Ticket
) -> None:
    post_action(agent, talked, "i-1", **{**REFUND, "item": "a"}, status="intended")
    failed = post_action(agent, talked, "i-2", **{**REFUND, "item": "b"}, status="intended").json()
    settle(agent, talked, failed["action"]["id"], status="failed", reason="card expired")
    assert state(talked)["refunded_cents_total"] == 0
    settle(agent, talked, "A1", status="succeeded")
    assert state(talked)["refunded_cents_total"] == 4000


# ---------------------------------------------------------------- intents


def test_an_intent_is_reserved_with_its_id_and_status(agent: APIClient, talked: Ticket) -> None:
    response = post_action(agent, talked, "rf-1", **REFUND, status="intended")
    assert response.status_code == 201
    body = response.json()
    assert (body["action"]["id"], body["action"]["status"]) == ("A1", "intended")
    assert body["refunded_cents_total"] == 0  # the money has not moved yet
    assert StateChange.objects.filter(ticket=talked, op="action_intended", subject_id="A1").exists()
    assert Ticket.objects.get(pk=talked.pk).open_intent_since is not None


def test_an_intent_for_an_item_already_refunded_is_refused_before_the_tool_runs(
    agent: APIClient, refunded: Ticket
) -> None:
    response = post_action(agent, refunded, "rf-2", **{**REFUND, "item": "Garden Table"}, status="intended")
    assert response.status_code == 409
    assert response.json()["earlier_action"]["id"] == "A1"


def test_an_open_intent_holds_its_item_against_a_second_one(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    second = post_action(agent, talked, "rf-2", **REFUND, status="intended")
    assert second.status_code == 409
    assert "reserved and not yet settled" in second.json()["message"]


def test_confirming_an_intent_records_the_refund(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    response = settle(agent, talked, "A1", status="succeeded")
    assert response.status_code == 200
    body = response.json()
    assert body["action"]["status"] == "succeeded" and body["refunded_cents_total"] == 4000
    assert Ticket.objects.get(pk=talked.pk).open_intent_since is None
    assert post_action(agent, talked, "rf-2", **REFUND, status="intended").status_code == 409


def test_a_settle_answers_in_the_documented_shape_with_the_action_as_the_state_shows_it(
    agent: APIClient, talked: Ticket
) -> None:
    """The settle's body is built once by the service (no output serializer walks it): it must still be exactly
    what ActionRecordedOut documents, and its action the state's, with no stored-only field."""
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    body = settle(agent, talked, "A1", status="succeeded", external_ref="re_123").json()
    assert body == ActionRecordedOut(body).data
    assert body["action"] == state(talked)["actions_taken"][0]
    assert (body["action"]["external_ref"], body["action"]["source"]) == ("re_123", "tool_result")
    assert not {"intended_at", "recorded_by_user_id"} & set(body["action"])
    assert body["state_version"] == state(talked)["version"]


def test_a_failed_intent_releases_the_item_and_a_retry_is_reserved(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    failed = settle(agent, talked, "A1", status="failed", reason="payment provider timeout")
    assert failed.status_code == 200
    assert failed.json()["action"]["failure_reason"] == "payment provider timeout"
    retry = post_action(agent, talked, "rf-2", **REFUND, status="intended")
    assert retry.status_code == 201
    assert (retry.json()["action"]["id"], retry.json()["action"]["repeat_of"]) == ("A2", None)
    assert settle(agent, talked, "A2", status="succeeded").json()["refunded_cents_total"] == 4000
    # Nothing is removed: the failed intent stays in the list, settled as failed.
    assert [a["status"] for a in state(talked)["actions_taken"]] == ["failed", "succeeded"]


def test_settling_twice_with_the_same_status_answers_the_same(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    first = settle(agent, talked, "A1", status="succeeded")
    again = settle(agent, talked, "A1", status="succeeded")
    assert again.status_code == 200 and again.json() == first.json()
    assert StateChange.objects.filter(ticket=talked, op="action_settled").count() == 1


def test_settling_with_the_other_status_is_answered_409(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    settle(agent, talked, "A1", status="succeeded")
    response = settle(agent, talked, "A1", status="failed", reason="oops")
    assert response.status_code == 409
    assert response.json()["error"] == "already_settled"
    assert response.json()["action"]["status"] == "succeeded"
    assert state(talked)["refunded_cents_total"] == 4000


def test_an_action_recorded_without_status_is_already_succeeded(agent: APIClient, refunded: Ticket) -> None:
    assert settle(agent, refunded, "A1", status="succeeded").status_code == 200
    assert settle(agent, refunded, "A1", status="failed", reason="x").status_code == 409


def test_settling_an_unknown_action_is_answered_404(agent: APIClient, talked: Ticket) -> None:
    response = settle(agent, talked, "A9", status="succeeded")
    assert response.status_code == 404 and response.json()["error"] == "action_not_found"
    assert settle(agent, "T-NOPE", "A1", status="succeeded").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"status": "failed"},
        {"status": "failed", "reason": "   "},
        {"status": "intended"},
        {"status": "done"},
        {},
        {"status": "succeeded", "extra": 1},
    ],
)
def test_a_malformed_settle_is_answered_400_and_changes_nothing(
    agent: APIClient, talked: Ticket, body: dict[str, Any]
) -> None:
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    response = settle(agent, talked, "A1", **body)
    assert response.status_code == 400, response.json()
    assert state(talked)["actions_taken"][0]["status"] == "intended"


@pytest.mark.parametrize(
    "body",
    [{"status": "succeeded"}, {"status": "failed"}, {"status": "done"}, {"status": "succeeded", "extra": 1}],
    ids=["good", "failed-without-reason", "unknown-status", "unknown-field"],
)
@pytest.mark.parametrize("ticket_id", ["T-NOPE", "T-" + "x" * 80], ids=["unknown", "too-long"])
def test_a_settle_on_an_unknown_ticket_is_answered_404_whatever_its_body(
    agent: APIClient, talked: Ticket, body: dict[str, Any], ticket_id: str
) -> None:
    """The settle reads its ticket with the locked state, not before the body is checked: an unknown ticket
    is still answered 404 first, as before, and nothing is written."""
    response = settle(agent, ticket_id, "A1", **body)
    assert response.status_code == 404, response.json()
    assert response.json()["error"] == "not_found"
    assert not StateChange.objects.filter(op="action_settled").exists()


@pytest.mark.parametrize(
    ("key", "body"),
    [
        ("rf-1", REFUND),
        (None, REFUND),
        ("bad key", REFUND),
        ("rf-1", {**REFUND, "amount_cents": -1}),
        ("rf-1", {**REFUND, "extra": 1}),
        ("rf-1", {**REFUND, "status": "failed"}),
    ],
    ids=["good", "no-key", "malformed-key", "negative-amount", "unknown-field", "failed"],
)
@pytest.mark.parametrize("ticket_id", ["T-NOPE", "T-" + "x" * 80], ids=["unknown", "too-long"])
def test_an_action_on_an_unknown_ticket_is_answered_404_whatever_its_key_and_body(
    agent: APIClient, talked: Ticket, key: str | None, body: dict[str, Any], ticket_id: str
) -> None:
    """The action reads its ticket with the locked state, not before its key and body are checked: an unknown
    ticket is still answered 404 first, as before, and nothing is kept."""
    response = post_action(agent, ticket_id, key, **body)
    assert response.status_code == 404, response.json()
    assert response.json()["error"] == "not_found"
    assert not IdempotencyRecord.objects.exists() and not RefusedAttempt.objects.exists()


def test_recording_an_action_as_failed_is_refused(agent: APIClient, talked: Ticket) -> None:
    response = post_action(agent, talked, "rf-1", **REFUND, status="failed")
    assert response.status_code == 400 and state(talked)["actions_taken"] == []


def test_a_retried_intent_with_its_key_is_replayed_and_the_key_cannot_change_status(
    agent: APIClient, talked: Ticket
) -> None:
    first = post_action(agent, talked, "rf-1", **REFUND, status="intended")
    again = post_action(agent, talked, "rf-1", **REFUND, status="intended")
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert post_action(agent, talked, "rf-1", **REFUND).status_code == 422
    assert IdempotencyRecord.objects.filter(ticket=talked).count() == 1


def test_a_deliberate_repeat_of_a_held_item_is_reserved_with_its_reason(
    agent: APIClient, refunded: Ticket
) -> None:
    response = post_action(
        agent,
        refunded,
        "rf-2",
        **REFUND,
        status="intended",
        repeat_of_earlier=True,
        reason="second leg cracked",
    )
    assert response.status_code == 201 and response.json()["action"]["repeat_of"] == "A1"


def test_intents_open_longer_than_the_class_timeout_are_stale(agent: APIClient, talked: Ticket) -> None:
    post_action(agent, talked, "rf-1", **REFUND, status="intended")
    assert not Ticket.objects.with_stale_intents().exists()
    later = timezone.now() + timedelta(minutes=16)
    assert list(Ticket.objects.with_stale_intents(now=later)) == [talked]
    klass = talked.ticket_class
    klass.intent_timeout_minutes = 30
    save_ticket_class(ticket_class=klass, by=None)  # the admin's path: open intents get the new timeout
    assert not Ticket.objects.with_stale_intents(now=later).exists()
    settle(agent, talked, "A1", status="failed", reason="declined")
    assert not Ticket.objects.with_stale_intents(now=later + timedelta(days=1)).exists()


# ---------------------------------------------------------------- refusals are kept


def test_a_refusal_is_kept_with_the_earlier_action_and_nothing_else(
    agent: APIClient, refunded: Ticket
) -> None:
    version = state(refunded)["version"]
    response = post_action(agent, refunded, "rf-2", **{**REFUND, "item": "Garden-Table", "at_turn": 5})
    assert response.status_code == 409
    attempt = RefusedAttempt.objects.get(ticket=refunded)
    assert response.json()["refused_attempt_id"] == attempt.pk
    assert (attempt.tool, attempt.item, attempt.amount_cents, attempt.at_turn) == (
        "issue_refund",
        "Garden-Table",
        4000,
        5,
    )
    assert attempt.earlier_action_id == "A1" and attempt.thread_turn == 6
    assert attempt.actor is not None and attempt.actor.username == "agent-smith"
    assert attempt.request["item"] == "Garden-Table" and "A1" in attempt.message
    # Nothing else: no action, no new version, no idempotency record for the refused key.
    assert state(refunded)["version"] == version
    assert not IdempotencyRecord.objects.filter(ticket=refunded, key="rf-2").exists()
    assert list(Ticket.objects.with_refused_attempts()) == [refunded]
    assert refused_attempts_count() == 1
    assert refused_attempts_count(since=timezone.now() + timedelta(seconds=1)) == 0


def test_a_refusal_inside_a_callers_transaction_is_kept_by_that_transaction(talked: Ticket) -> None:
    """The domain service rolls the action back and writes the refusal in the caller's transaction."""
    from django.db import transaction

    from tickets.errors import RepeatRefused

    record_action(ticket=talked, idempotency_key="k1", **REFUND)
    with transaction.atomic(), pytest.raises(RepeatRefused):
        record_action(ticket=talked, idempotency_key="k2", **{**REFUND, "tool": "Issue Refund"})
    assert RefusedAttempt.objects.filter(ticket=talked, earlier_action_id="A1").count() == 1
    assert len(state(talked)["actions_taken"]) == 1
