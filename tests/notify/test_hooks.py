"""The hooks where the events happen: a compaction whose summary misses a pinned fact, a failed compaction,
and two recorders racing on PostgreSQL."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connection

from compaction.models import CompactionEvent
from core.vocabulary import CompactionStatus
from notify import events
from notify.models import Channel, Notification
from tests.factories import import_t40118
from tests.fake_openai import Reply
from tests.notify.conftest import Answer
from tickets.models import TicketClass

SECRET = "whsec-hooks"


def t40118_class(backend: str = "openai") -> TicketClass:
    return TicketClass.objects.create(
        slug="standard-8k",
        token_budget=8000,
        compaction_threshold=0.8,
        summarizer_backend=backend,
        summarizer_model="cheap-summarizer",
    )


@pytest.mark.django_db
def test_the_seed_lossy_summary_notifies_a_coverage_miss_once(
    scenario: dict[str, Any], openai_server: Any, receiver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    hook = receiver([Answer(200)])
    ticket_class = t40118_class()
    for name in ("#cx", "#refunds"):
        Channel.objects.create(
            ticket_class=ticket_class, name=name, url=hook.url, secret=SECRET, events=["coverage_miss"]
        )
    lossy = Reply(content=json.dumps(scenario["lossy_summary_turns_1_14"]))
    with openai_server([lossy]), django_capture_on_commit_callbacks(execute=True):
        ticket = import_t40118(scenario, backend="openai")
    event = CompactionEvent.objects.get(ticket=ticket, status=CompactionStatus.APPLIED)
    notifications = list(Notification.objects.all())
    assert {(n.kind, n.source_id, n.status) for n in notifications} == {
        ("coverage_miss", f"compaction:{event.pk}", "delivered")
    }
    assert len(notifications) == 2 == len(hook.received)  # one per channel
    for request in hook.received:
        body = json.loads(request.body)
        assert "4000 cents garden-table" in body["text"]
        assert body["event"]["compaction"]["number"] == event.number
        assert body["event"]["url"].endswith(f"/tickets/T-40118/compactions/{event.number}/")
    # The hook firing again for the same compaction sends nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        events.record_compaction(event)
    assert Notification.objects.count() == 2 == len(hook.received)


@pytest.mark.django_db
def test_a_compaction_that_never_validates_notifies_a_failure(
    scenario: dict[str, Any], openai_server: Any, receiver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    hook = receiver([Answer(200)])
    Channel.objects.create(
        ticket_class=t40118_class(), name="#cx", url=hook.url, secret=SECRET, events=["failed_compaction"]
    )
    with openai_server([Reply(content="not json")]), django_capture_on_commit_callbacks(execute=True):
        ticket = import_t40118(scenario, backend="openai")
    failed = CompactionEvent.objects.filter(ticket=ticket, status=CompactionStatus.FAILED)
    assert failed.exists()
    kinds = set(Notification.objects.values_list("kind", flat=True))
    assert kinds == {"failed_compaction"}
    assert Notification.objects.count() == failed.count() == len(hook.received)
    assert "no valid summary" in json.loads(hook.received[0].body)["text"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_on_one_event_record_it_once(receiver: Any) -> None:
    hook = receiver([Answer(200)])
    ticket_class = TicketClass.objects.create(slug="race", token_budget=8000, compaction_threshold=0.8)
    Channel.objects.create(ticket_class=ticket_class, name="#race", url=hook.url, secret=SECRET)
    barrier = threading.Barrier(4)
    results: list[int] = []

    def worker() -> None:
        try:
            barrier.wait()
            created = events.record(
                ticket_class_id=ticket_class.pk,
                kind="failed_compaction",
                source_id="compaction:42",
                ticket_ref="T-race",
                detail="crashed",
                event={},
            )
            results.append(len(created))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 0, 0, 1]
    assert Notification.objects.count() == 1 and len(hook.received) == 1
