"""Concurrent retries of one action, on PostgreSQL where requests really run side by side."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection, connections, transaction
from rest_framework.test import APIClient

from tests.desk.api.conftest import REFUND, post_action
from tests.factories import chat
from tickets.accounts import ROLES, create_agent
from tickets.models import IdempotencyRecord, PinnedState, Ticket, TicketClass
from tickets.services.idempotency import advisory_key
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 8


@pytest.fixture
def setup(transactional_db: None) -> tuple[Ticket, str]:
    # transactional_db empties the tables between tests, the role groups of the data migration with them.
    for role in ROLES:
        Group.objects.get_or_create(name=role)
    ticket_class = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    ticket = open_ticket(
        ticket_id="T-9", order_id="SU-9", seller_type="marketplace", ticket_class=ticket_class
    )
    chat(ticket, 2)
    return ticket, create_agent(name="agent-threads")


def in_threads(count: int, token: str, request: Callable[[APIClient, int], Any]) -> list[Any]:
    """Run `request` from `count` threads released together, each with its own connection."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        try:
            barrier.wait()
            results[index] = request(client, index)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_concurrent_retries_with_one_key_record_the_action_once(setup: tuple[Ticket, str]) -> None:
    """Duplicates that overlap the first are told 409 (in flight) or get its replay; one action either way."""
    ticket, token = setup
    answers = in_threads(THREADS, token, lambda client, _: post_action(client, ticket, "rf-1", **REFUND))

    assert all(a is not None for a in answers)
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {201, 409}
    originals = [a for a in answers if a.status_code == 201 and "Idempotent-Replayed" not in a]
    assert len(originals) == 1
    for answer in answers:
        if answer.status_code == 409:
            assert answer.json()["error"] == "idempotency_key_in_flight"
        elif answer is not originals[0]:
            assert answer["Idempotent-Replayed"] == "true"
            assert answer.json() == originals[0].json()

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    retry = post_action(client, ticket, "rf-1", **REFUND)
    assert retry.status_code == 201 and retry["Idempotent-Replayed"] == "true"
    assert retry.json() == originals[0].json()
    assert len(PinnedState.objects.get(ticket=ticket).items.actions_taken) == 1
    assert IdempotencyRecord.objects.filter(ticket=ticket).count() == 1


def test_a_request_whose_key_is_still_in_flight_is_answered_409_then_replayed(
    setup: tuple[Ticket, str],
) -> None:
    """While another transaction holds the key, a duplicate is told so at once; once it ends, it goes through."""
    ticket, token = setup
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    holding, release = threading.Event(), threading.Event()

    def first_request_in_flight() -> None:
        # Stands in for a request that took the key and has not committed yet.
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(ticket, "rf-1")])
                holding.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=first_request_in_flight)
    holder.start()
    try:
        assert holding.wait(timeout=10)
        in_flight = post_action(client, ticket, "rf-1", **REFUND)
        other_key = post_action(
            client, ticket, "track-1", tool="track_parcel", item="parasol", reversible=True
        )
    finally:
        release.set()
        holder.join(timeout=30)
    assert in_flight.status_code == 409
    assert in_flight.json()["error"] == "idempotency_key_in_flight"
    assert "rf-1" in in_flight.json()["message"]
    assert other_key.status_code == 201

    after = post_action(client, ticket, "rf-1", **REFUND)
    assert after.status_code == 201 and "Idempotent-Replayed" not in after
    assert len(PinnedState.objects.get(ticket=ticket).items.actions_taken) == 2


def test_concurrent_refunds_of_one_item_with_new_keys_record_one_and_refuse_the_rest(
    setup: tuple[Ticket, str],
) -> None:
    ticket, token = setup
    answers = in_threads(THREADS, token, lambda client, i: post_action(client, ticket, f"rf-{i}", **REFUND))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] + [409] * (THREADS - 1)
    assert {a.json()["error"] for a in answers if a.status_code == 409} == {"repeat_refused"}
    assert PinnedState.objects.get(ticket=ticket).items.refunded_cents_total == 4000


def test_twenty_concurrent_intents_with_beliefs_reserve_exactly_one(setup: tuple[Ticket, str]) -> None:
    """Twenty agents who each believe nothing was refunded ask at once, each for another item in other words:
    identity lets them all through, the belief check (an open intent moves the figure) lets one."""
    ticket, token = setup

    def ask(client: APIClient, i: int) -> Any:
        body = {**REFUND, "item": f"part {chr(ord('a') + i)}", "status": "intended"}
        return post_action(client, ticket, f"belief-{i}", **body, expects={"refunded_cents_total": 0})

    answers = in_threads(20, token, ask)
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] + [409] * 19
    assert {a.json()["error"] for a in answers if a.status_code == 409} == {"belief_stale"}
    actions = (
        PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket).items.actions_taken
    )
    assert [a.status for a in actions] == ["intended"]
