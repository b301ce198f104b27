"""Compaction under faults: a summarizer that drip-feeds or hangs, a runner killed mid-compaction.

The summarizer is a real HTTP server on loopback (tests/fake_openai.py); the killed runner is a real
process (`manage.py shell` or `manage.py db_worker`) sent SIGKILL while the summarizer has its request.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from compaction.models import CompactionEvent, CompactionStatus
from compaction.services import run_compaction
from desk.turns import receive_turn
from tests.fake_openai import FakeOpenAI, Reply
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

VALID = json.dumps(
    {
        "decisions": [],
        "actions_taken": [],
        "customer_constraints": [],
        "open_questions": [],
        "narrative": "The parcel is late; the agent is checking with the carrier.",
    }
)
DB_TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
# The runner's lease in the killed process: a 2 s deadline plus 0.5 s of grace.
RUNNER_DEADLINE = 2.0
RUNNER_GRACE = 0.5


def _due_ticket(ticket_id: str) -> Ticket:
    """A ticket just over its threshold, mid-decision: its next boundary claims a compaction."""
    klass = TicketClass.objects.create(
        slug=f"small-{ticket_id.lower()}",
        token_budget=2000,
        compaction_threshold=0.8,
        keep_recent_tokens=200,
        summarizer_backend="openai",
        summarizer_model="cheap",
    )
    ticket = open_ticket(ticket_id=ticket_id, order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    receive_turn(ticket=ticket, role="customer", content="My parcel is late. " * 280)
    return ticket


def _boundary(ticket: Ticket, text: str = "Checking with the carrier. ") -> dict[str, Any]:
    return receive_turn(ticket=ticket, role="agent", content=text * 40, boundary="reply_sent").as_json()


@pytest.mark.django_db
@override_settings(SUNDRY_COMPACTION_DEADLINE_SECONDS=2.0)
def test_a_drip_feeding_summarizer_costs_the_turn_one_deadline(openai_server) -> None:
    """A 200, its headers, then one byte every 2 s: no read ever times out, yet the turn answers within the
    deadline plus a second, with a failed event and nothing left running."""
    ticket = _due_ticket("T-DRIP")
    with openai_server([Reply(content=VALID, drip=2.0)]) as fake:
        started = time.monotonic()
        answer = _boundary(ticket)
        elapsed = time.monotonic() - started
    assert fake.requests, f"the summarizer was never called: {answer} {CompactionEvent.objects.values()}"
    assert elapsed < 2.0 + 1.0, f"the turn answered after {elapsed:.1f}s"
    assert answer["compaction"]["status"] == "failed"
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=2)
    assert event.status == CompactionStatus.FAILED
    assert any("deadline" in e for e in event.validation_errors), event.validation_errors
    assert not CompactionEvent.objects.pending().filter(ticket=ticket).exists()


@pytest.mark.django_db
@override_settings(SUNDRY_COMPACTION_DEADLINE_SECONDS=1.5)
def test_a_hanging_summarizer_answers_at_the_deadline(openai_server) -> None:
    """No headers at all for 30 s: the turn answers within the deadline plus a second."""
    ticket = _due_ticket("T-HANG2")
    with openai_server([Reply(content=VALID, delay=30)]):
        started = time.monotonic()
        answer = _boundary(ticket)
        elapsed = time.monotonic() - started
    assert elapsed < 1.5 + 1.0, f"the turn answered after {elapsed:.1f}s"
    assert answer["compaction"]["status"] == "failed"
    assert not CompactionEvent.objects.pending().filter(ticket=ticket).exists()


@pytest.mark.django_db
@override_settings(SUNDRY_COMPACTION_DEADLINE_SECONDS=10.0)
def test_an_exit_during_the_summarizer_call_leaves_a_failed_event(openai_server) -> None:
    """gunicorn's worker timeout is a signal whose handler raises SystemExit wherever the worker is: the run
    records a failed event and the exit goes on; nothing is left `running`."""
    ticket = _due_ticket("T-EXIT")
    with override_settings(TASKS=DB_TASKS):
        answer = _boundary(ticket)  # claimed, queued for a worker that is not running
    assert answer["compaction"]["status"] == "queued"
    event = CompactionEvent.objects.get(ticket=ticket, number=answer["compaction"]["number"])

    def exit_now(signum: int, frame: Any) -> None:
        sys.exit(1)

    previous = signal.signal(signal.SIGALRM, exit_now)
    try:
        with openai_server([Reply(content=VALID, delay=30)]) as fake:
            signal.setitimer(signal.ITIMER_REAL, 1.0)
            with pytest.raises(SystemExit):
                run_compaction(event_pk=event.pk)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fake.requests
    event.refresh_from_db()
    assert event.status == CompactionStatus.FAILED
    assert "SystemExit" in event.validation_errors[-1]


def _subprocess_env(fake: FakeOpenAI, **extra: str) -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "sk-test-loopback",
        "SUNDRY_COMPACTION_DEADLINE_SECONDS": str(RUNNER_DEADLINE),
        "SUNDRY_SUMMARIZER_TIMEOUT_SECONDS": "30",
        "SUNDRY_COMPACTION_LEASE_GRACE_SECONDS": str(RUNNER_GRACE),
        "DJANGO_SETTINGS_MODULE": "sundry.settings",
        **extra,
    }
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = str(db["PASSWORD"])
    return env


def _kill_once_called(process: subprocess.Popen[bytes], fake: FakeOpenAI) -> None:
    for _ in range(1500):
        if fake.requests or process.poll() is not None:
            break
        time.sleep(0.02)
    assert fake.requests, f"the runner never called the summarizer (exit {process.poll()})"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def _wait_for_lease(event: CompactionEvent) -> None:
    event.refresh_from_db()
    assert event.status == CompactionStatus.RUNNING and event.lease_expires_at is not None
    from django.utils import timezone

    while timezone.now() <= event.lease_expires_at:
        time.sleep(0.1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_runner_killed_mid_compaction_is_retaken_by_the_next_boundary(openai_server) -> None:
    """Immediate backend: a process posts the boundary turn and is killed (SIGKILL) while the summarizer has the
    request. Its event stays `running` under a lease; once the lease expired, the next boundary retakes it."""
    ticket = _due_ticket("T-KILL")
    with openai_server([Reply(content=VALID, delay=60)]) as fake:
        runner = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-c", _POST_BOUNDARY.format(ticket_id=ticket.ticket_id)],
            cwd=settings.BASE_DIR,
            env=_subprocess_env(fake),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _kill_once_called(runner, fake)
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=2)
    _wait_for_lease(event)

    with openai_server([Reply(content=VALID)]) as fake:
        answer = _boundary(ticket, "The carrier answered. ")
    assert len(fake.requests) == 1
    assert answer["compaction"]["status"] == "applied"
    assert answer["compaction"]["number"] == event.number  # the abandoned claim itself, retaken
    event.refresh_from_db()
    assert event.status == CompactionStatus.APPLIED
    assert not CompactionEvent.objects.pending().filter(ticket=ticket).exists()


_POST_BOUNDARY = """
from desk.turns import receive_turn
from tickets.models import Ticket
ticket = Ticket.objects.select_related("ticket_class").get(ticket_id="{ticket_id}")
receive_turn(ticket=ticket, role="agent", content="Checking with the carrier. " * 40, boundary="reply_sent")
"""


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_db_worker_killed_mid_compaction_is_retaken_by_the_worker(openai_server) -> None:
    """django-tasks-db: the worker is killed (SIGKILL) while the summarizer has the request; its task row stays
    RUNNING for ever. Past the lease, the next boundary queues the claim again and a new worker retakes it."""
    from django_tasks_db.models import DBTaskResult

    ticket = _due_ticket("T-KILLW")
    with override_settings(TASKS=DB_TASKS):
        answer = _boundary(ticket)
    assert answer["compaction"]["status"] == "queued"
    with openai_server([Reply(content=VALID, delay=60)]) as fake:
        worker = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "db_worker",
                "--no-reload",
                "--no-startup-delay",
                "--interval",
                "0.1",
            ],
            cwd=settings.BASE_DIR,
            env=_subprocess_env(fake, TASKS_BACKEND="django_tasks_db.DatabaseBackend"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _kill_once_called(worker, fake)
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=2)
    assert DBTaskResult.objects.filter(status="RUNNING").count() == 1, list(
        DBTaskResult.objects.values("status", "backend_name", "worker_ids")
    )
    _wait_for_lease(event)

    with override_settings(TASKS=DB_TASKS):
        again = _boundary(ticket, "The carrier answered. ")
        # Somebody is doing it: a task waits for the worker.
        assert again["compaction"]["status"] == "queued"
        assert DBTaskResult.objects.filter(status="READY").count() == 1
        with openai_server([Reply(content=VALID)]) as fake:
            call_command("db_worker", "--batch", "--no-startup-delay", stdout=StringIO(), stderr=StringIO())
    assert len(fake.requests) == 1
    event.refresh_from_db()
    assert event.status == CompactionStatus.APPLIED
    assert not CompactionEvent.objects.pending().filter(ticket=ticket).exists()
