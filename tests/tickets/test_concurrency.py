"""Concurrent writers on PostgreSQL: row locks, not luck, keep the pinned state whole."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, connections
from django.test import override_settings

from compaction.models import CompactionEvent
from compaction.services import run_compaction
from desk.turns import receive_turn
from tickets.errors import RepeatRefused
from tickets.models import PinnedState, RefusedAttempt, StateChange, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 8


def run_together(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Start `count` workers at the same moment; each closes its own connection."""
    barrier = threading.Barrier(count)

    def worker(index: int) -> Any:
        try:
            barrier.wait()
            return work(index)
        except Exception as exc:  # returned, so the test sees every outcome
            return exc
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(worker, range(count)))


@pytest.fixture
def ticket() -> Ticket:
    assert connection.vendor == "postgresql"
    klass = TicketClass.objects.create(slug="c-8k", token_budget=8000, compaction_threshold=0.8)
    ticket = open_ticket(ticket_id="T-C", order_id="SU-C", seller_type="marketplace", ticket_class=klass)
    receive_turn(ticket=ticket, role="customer", content="several things broke")
    return ticket


def test_concurrent_record_action_calls_lose_nothing(ticket: Ticket) -> None:
    amounts = [100 * (i + 1) for i in range(THREADS * 3)]

    def work(index: int) -> None:
        for n in range(3):
            k = index * 3 + n
            record_action(
                ticket=ticket,
                tool="issue_refund",
                item=f"item-{k}",
                amount_cents=amounts[k],
                idempotency_key=f"key-{k}",
                at_turn=1,
            )

    outcomes = run_together(THREADS, work)
    assert [o for o in outcomes if o is not None] == []
    state = PinnedState.objects.get(ticket=ticket)
    assert len(state.items.actions_taken) == len(amounts)
    assert state.items.refunded_cents_total == sum(amounts)
    assert state.version == 1 + len(amounts)
    assert sorted(a.id for a in state.items.actions_taken) == sorted(f"A{i + 1}" for i in range(len(amounts)))
    assert StateChange.objects.filter(ticket=ticket, op="action_taken").count() == len(amounts)


def test_concurrent_retries_with_one_key_record_the_action_once(ticket: Ticket) -> None:
    def work(index: int) -> bool:
        result = record_action(
            ticket=ticket,
            tool="issue_refund",
            item="garden-table",
            amount_cents=4000,
            idempotency_key="same-key",
            at_turn=1,
        )
        return result.replayed

    replayed = run_together(THREADS, work)
    assert sorted(replayed) == [False] + [True] * (THREADS - 1)
    assert PinnedState.objects.get(ticket=ticket).items.refunded_cents_total == 4000


def test_concurrent_new_refunds_of_one_item_let_exactly_one_through(ticket: Ticket) -> None:
    """Different keys, same item: the repeat guard holds under a race too."""

    def work(index: int) -> str:
        record_action(
            ticket=ticket,
            tool="issue_refund",
            item="garden-table",
            amount_cents=4000,
            idempotency_key=f"k-{index}",
            at_turn=1,
        )
        return "recorded"

    outcomes = run_together(THREADS, work)
    assert outcomes.count("recorded") == 1
    assert sum(isinstance(o, RepeatRefused) for o in outcomes) == THREADS - 1
    assert PinnedState.objects.get(ticket=ticket).items.refunded_cents_total == 4000


def test_concurrent_turns_get_consecutive_numbers(ticket: Ticket) -> None:
    run_together(THREADS, lambda i: receive_turn(ticket=ticket, role="customer", content=f"message {i}"))
    numbers = list(Turn.objects.filter(ticket=ticket).order_by("number").values_list("number", flat=True))
    assert numbers == list(range(1, THREADS + 2))


@override_settings(TASKS={"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}})
def test_concurrent_runs_of_one_claimed_compaction_make_one_summary(ticket: Ticket) -> None:
    """A claim left for a worker, run by eight at once: one takes it, one summary, one applied event."""
    receive_turn(ticket=ticket, role="agent", content="tracking scan " * 1700, boundary="reply_sent")
    receive_turn(ticket=ticket, role="customer", content="tracking scan " * 1500)
    received = receive_turn(ticket=ticket, role="agent", content="ok", boundary="reply_sent")
    claimed = received.compaction.event
    assert received.compaction.status == "queued" and claimed is not None

    events = run_together(THREADS, lambda i: run_compaction(event_pk=claimed.pk))
    assert all(isinstance(e, CompactionEvent) for e in events), events
    assert {e.pk for e in events} == {claimed.pk}
    final = CompactionEvent.objects.get(pk=claimed.pk)
    assert final.status == "applied" and final.attempts == 1
    assert CompactionEvent.objects.filter(ticket=ticket).exclude(status="deferred").count() == 1


def test_twenty_concurrent_intents_for_one_item_reserve_exactly_one(ticket: Ticket) -> None:
    """However the agents spell the item, one intent holds it; the other nineteen are refused and kept."""
    spellings = ["garden-table", "Garden-Table", "garden_table", "garden\u200b-table", "GARDEN TABLE"]

    def work(index: int) -> str:
        record_action(
            ticket=ticket,
            tool="issue_refund" if index % 2 else "Issue-Refund",
            item=spellings[index % len(spellings)],
            amount_cents=4000,
            idempotency_key=f"intent-{index}",
            at_turn=1,
            status="intended",
        )
        return "reserved"

    outcomes = run_together(20, work)
    assert outcomes.count("reserved") == 1, outcomes
    assert sum(isinstance(o, RepeatRefused) for o in outcomes) == 19
    actions = (
        PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket).items.actions_taken
    )
    assert [(a.id, a.status) for a in actions] == [("A1", "intended")]
    assert RefusedAttempt.objects.filter(ticket=ticket, earlier_action_id="A1").count() == 19
    assert Ticket.objects.get(pk=ticket.pk).open_intent_since is not None
