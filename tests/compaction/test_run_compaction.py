"""Compaction in three steps: claim, summarize with nothing held, apply under a short lock.

The summarizer is the edge we do not own, so it is a real HTTP server on loopback that hangs, answers
HTML or garbage, or answers well, as the test scripts it.
"""

from __future__ import annotations

import json
import threading
import time
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from compaction.models import CompactionEvent
from compaction.services import run_compaction
from core.vocabulary import CompactionStatus
from desk.turns import receive_turn
from tests.browser.desk_data import ensure_roles
from tests.factories import import_t40118
from tests.fake_openai import Reply
from tickets.accounts import create_agent
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

VALID = {
    "decisions": [],
    "actions_taken": ["A1: issue_refund of 4000 cents for garden-table at turn 6"],
    "customer_constraints": ["C1: no replacement wanted"],
    "open_questions": ["Q1: photo of the second item (parasol) still outstanding"],
    "narrative": "Table scratched; partial refund issued; parasol tracked.",
}
DB_TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
NO_CHOICES = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []})


@pytest.mark.django_db
@pytest.mark.parametrize(
    "reply",
    [
        Reply(raw="<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html"),
        Reply(raw="not json at all {{{", content_type="application/json"),
        Reply(raw=NO_CHOICES),
        Reply(raw=json.dumps({"result": "ok"})),
        Reply(raw=""),
    ],
    ids=["html", "non-json", "no-choices", "wrong-shape", "empty-body"],
)
def test_a_reply_that_is_not_a_chat_completion_is_a_failed_attempt(
    scenario: dict[str, Any], openai_server, reply: Reply
) -> None:
    """Three attempts, each recorded, then a failed event: nothing crashes, nothing is replaced."""
    with openai_server([reply]) as fake:
        ticket = import_t40118(scenario, backend="openai", until=22)
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=22)
    assert event.status == CompactionStatus.FAILED
    assert event.attempts == 3 and len(fake.requests) == 3
    assert len(event.validation_errors) == 3, event.validation_errors
    assert event.first_replaced_turn is None
    assert Ticket.objects.get(pk=ticket.pk).context_tokens == event.tokens_before


@pytest.mark.django_db
@override_settings(SUNDRY_COMPACTION_DEADLINE_SECONDS=1.0)
def test_one_deadline_is_shared_by_every_attempt(scenario: dict[str, Any], openai_server) -> None:
    """A summarizer that hangs costs the turn one deadline, not three timeouts: later attempts are not made."""
    with openai_server([Reply(content=json.dumps(VALID), delay=30)]) as fake:
        ticket = import_t40118(scenario, backend="openai", until=22)
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=22)
    assert event.status == CompactionStatus.FAILED
    assert len(fake.requests) == 1
    assert "timed out" in event.validation_errors[0]
    assert "deadline" in event.validation_errors[-1]
    assert event.latency_ms < 5000  # the recorded cost of the attempts, well under one 30 s hang


@pytest.mark.django_db
def test_after_a_failure_the_next_boundaries_back_off(scenario: dict[str, Any], openai_server) -> None:
    """A failed compaction is not retried at every boundary: the next try waits some turns (or time)."""
    with openai_server([Reply(status=500)]) as fake:
        ticket = import_t40118(scenario, backend="openai", until=22)
        assert len(fake.requests) == 3
        waited = receive_turn(ticket=ticket, role="customer", content="Any news?")
        assert waited.compaction.status == "deferred"
        waited = receive_turn(ticket=ticket, role="agent", content="Still checking.", boundary="reply_sent")
        assert waited.compaction.status == "deferred" and "backing off" in waited.compaction.reason
        assert len(fake.requests) == 3  # no summarizer call while backing off
        for n in range(2):
            receive_turn(ticket=ticket, role="customer", content=f"Hello again {n}")
        retried = receive_turn(
            ticket=ticket, role="agent", content="Here is what I found.", boundary="reply_sent"
        )
        assert retried.compaction.status == "failed"
        assert len(fake.requests) == 6
    failed = list(
        CompactionEvent.objects.filter(ticket=ticket, status="failed").values_list("at_turn", flat=True)
    )
    assert failed == [22, 27]  # 27: the first boundary at least four turns after 22


def _small_openai_class() -> TicketClass:
    return TicketClass.objects.create(
        slug="small-2k",
        token_budget=2000,
        compaction_threshold=0.8,
        keep_recent_tokens=200,
        summarizer_backend="openai",
        summarizer_model="cheap",
    )


def _summary_reply() -> Reply:
    return Reply(
        content=json.dumps(
            {
                "decisions": [],
                "actions_taken": [],
                "customer_constraints": [],
                "open_questions": [],
                "narrative": "n",
            }
        )
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(SUNDRY_COMPACTION_DEADLINE_SECONDS=3.0)
def test_a_hanging_summarizer_holds_nothing_the_agent_needs(openai_server) -> None:
    """While the summarizer hangs inside a turn, an action POST and a state GET on the same ticket answer,
    and the turn itself answers at the deadline with a failed event."""
    from rest_framework.test import APIClient

    ensure_roles()  # a transactional test before this one may have flushed the roles' groups
    agent_token = create_agent(name="agent-hang")
    klass = _small_openai_class()
    ticket = open_ticket(ticket_id="T-HANG", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    receive_turn(ticket=ticket, role="customer", content="My parcel is late. " * 280)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {agent_token}")
    answers: dict[str, Any] = {}

    def post_boundary_turn() -> None:
        try:
            other = APIClient()
            other.credentials(HTTP_AUTHORIZATION=f"Token {agent_token}")
            answers["turn"] = other.post(
                "/api/v1/tickets/T-HANG/turns/",
                {"role": "agent", "content": "Checking with the carrier. " * 40, "boundary": "reply_sent"},
                format="json",
            )
        finally:
            connections.close_all()

    with openai_server([Reply(content="{}", delay=30)]) as fake:
        turn_thread = threading.Thread(target=post_boundary_turn)
        turn_thread.start()
        for _ in range(200):
            if fake.requests:
                break
            time.sleep(0.02)
        assert fake.requests, f"the summarizer was never called: {answers}"
        action = client.post(
            "/api/v1/tickets/T-HANG/actions/",
            {"tool": "track_parcel", "item": "parcel-1", "reversible": True},
            format="json",
            HTTP_IDEMPOTENCY_KEY="track-1",
        )
        state = client.get("/api/v1/tickets/T-HANG/state/")
        answered_during_hang = turn_thread.is_alive()
        turn_thread.join(timeout=20)
    assert action.status_code == 201 and state.status_code == 200
    assert answered_during_hang, "the action and the state answered only after the turn finished"
    assert answers["turn"].status_code == 201
    assert answers["turn"].json()["compaction"]["status"] == "failed"
    event = CompactionEvent.objects.get(ticket__ticket_id="T-HANG", status="failed")
    assert any("deadline" in e or "timed out" in e for e in event.validation_errors)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(TASKS=DB_TASKS)
def test_many_boundaries_queued_on_one_ticket_make_one_summarizer_call(openai_server) -> None:
    """An agent posting step after step while the worker is behind: one claim, joined by every later
    boundary, and one summarizer call that compacts up to the newest boundary."""
    klass = TicketClass.objects.create(
        slug="c-4k",
        token_budget=4000,
        compaction_threshold=0.8,
        summarizer_backend="openai",
        keep_recent_tokens=300,
    )
    ticket = open_ticket(ticket_id="T-Q", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    # Just over the 3,200-token threshold, mid-decision: the next boundary claims, the others join it.
    first = receive_turn(ticket=ticket, role="customer", content="tracking scan " * 1560)
    assert first.compaction.status == "deferred"
    statuses = []
    for step in range(12):
        answer = receive_turn(
            ticket=ticket, role="agent", content=f"Step {step}: on its way.", boundary="reply_sent"
        )
        statuses.append(answer.compaction.status)
        assert "pending_since" in answer.compaction.as_json()
        receive_turn(ticket=ticket, role="customer", content=f"Step {step}: any news?")
    assert statuses == ["queued"] * 12
    claims = CompactionEvent.objects.filter(ticket=ticket).exclude(status="deferred")
    assert claims.count() == 1 and claims.get().status == "pending"
    assert claims.get().upto_turn == ticket.turn_count - 1  # the newest boundary

    with openai_server([_summary_reply()]) as fake:
        call_command("db_worker", "--batch", "--no-startup-delay", stdout=StringIO(), stderr=StringIO())
    assert len(fake.requests) == 1
    event = claims.get()
    assert event.status == "applied"
    ticket.refresh_from_db()
    assert ticket.context_tokens < klass.threshold_tokens


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(TASKS=DB_TASKS)
def test_a_result_whose_window_moved_meanwhile_is_superseded(openai_server) -> None:
    """A worker's run is summarizing when the hard ceiling forces a compaction inline; the inline one applies
    first, so the worker's summary is recorded as superseded and replaces nothing."""
    klass = _small_openai_class()
    ticket = open_ticket(ticket_id="T-S", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    receive_turn(ticket=ticket, role="customer", content="Where is my parcel? " * 280)
    claim = receive_turn(ticket=ticket, role="agent", content="Checking. " * 100, boundary="reply_sent")
    assert claim.compaction.status == "queued"
    claimed = claim.compaction.event
    assert claimed is not None
    worker: dict[str, Any] = {}

    def run_worker() -> None:
        try:
            worker["event"] = run_compaction(event_pk=claimed.pk)
        finally:
            connections.close_all()

    slow, fast = _summary_reply(), _summary_reply()
    slow.delay = 2.0
    with openai_server([slow, fast]) as fake:
        thread = threading.Thread(target=run_worker)
        thread.start()
        for _ in range(200):
            if fake.requests:
                break
            time.sleep(0.02)
        forced = receive_turn(ticket=ticket, role="customer", content="Hello? I need an answer now. " * 50)
        thread.join(timeout=20)
    assert forced.compaction.status == "forced"
    superseded = CompactionEvent.objects.get(pk=claimed.pk)
    assert superseded.status == CompactionStatus.SUPERSEDED, superseded.reason
    assert superseded.first_replaced_turn is None
    assert "replaced this window" in superseded.reason
    assert CompactionEvent.objects.filter(ticket=ticket).applied().count() == 1
