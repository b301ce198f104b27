"""Compaction as a django.tasks task: inline by default, queued for a worker with django-tasks-db."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from compaction.models import CompactionEvent
from desk.importer import ImportTicket
from desk.turns import receive_turn
from tests.factories import import_t40118
from tickets.models import Ticket

pytestmark = pytest.mark.django_db(transaction=True)

DB_TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


def test_immediate_backend_compacts_inline_in_the_turn(scenario: dict[str, Any]) -> None:
    ticket = import_t40118(scenario, until=21)
    turn_22 = ImportTicket.model_validate(scenario).turns[21]
    appended = receive_turn(
        ticket=ticket, role=turn_22.role, content=turn_22.content, boundary=turn_22.boundary
    )
    assert appended.compaction is not None and appended.compaction.status == "applied"
    assert appended.context_tokens < appended.threshold_tokens


@override_settings(TASKS=DB_TASKS)
def test_database_backend_queues_the_compaction_for_the_worker(scenario: dict[str, Any]) -> None:
    from django_tasks_db.models import DBTaskResult

    ticket = import_t40118(scenario, until=21)
    turn_22 = ImportTicket.model_validate(scenario).turns[21]
    appended = receive_turn(
        ticket=ticket, role=turn_22.role, content=turn_22.content, boundary=turn_22.boundary
    )
    assert appended.compaction is not None and appended.compaction.status == "queued"
    assert not CompactionEvent.objects.filter(ticket=ticket, status="applied").exists()
    assert DBTaskResult.objects.count() == 1

    call_command("db_worker", "--batch", "--no-startup-delay", stdout=StringIO(), stderr=StringIO())

    event = CompactionEvent.objects.get(ticket=ticket, status="applied")
    assert event.at_turn == 22
    ticket = Ticket.objects.get(pk=ticket.pk)
    assert ticket.context_tokens < ticket.ticket_class.threshold_tokens


@override_settings(TASKS=DB_TASKS)
def test_an_import_counts_one_open_deferral_once_while_the_worker_is_behind(tmp_path: Any) -> None:
    """With the worker backend the claim at turn 22 stays pending; turns 23-26 join it (24 is the newest
    boundary), so the worker makes one summarizer call that compacts up to turn 24 at most."""
    from django.core.management import call_command

    out = StringIO()
    call_command("import_tickets", "demo/T-40118.json", stdout=out)
    assert "compactions: 1 deferred, 1 queued" in out.getvalue()
    ticket = Ticket.objects.get(ticket_id="T-40118")
    assert list(
        CompactionEvent.objects.filter(ticket=ticket).values_list("number", "at_turn", "upto_turn", "status")
    ) == [(1, 21, None, "deferred"), (2, 22, 24, "pending")]

    call_command("db_worker", "--batch", "--no-startup-delay", stdout=StringIO(), stderr=StringIO())

    event = CompactionEvent.objects.get(ticket=ticket, number=2)
    assert event.status == "applied"
    assert event.last_replaced_turn is not None and event.last_replaced_turn <= 24


@override_settings(TASKS=DB_TASKS)
def test_the_context_shows_the_claim_a_worker_has_still_to_run(scenario: dict[str, Any]) -> None:
    """An agent reading its context while the worker is behind is told: which compaction, since when, up to
    which turn; once the worker has run it, the claim is gone and the summary is in."""
    from datetime import datetime

    from desk.api.selectors import ticket_context

    ticket = import_t40118(scenario, until=21)
    turn_22 = ImportTicket.model_validate(scenario).turns[21]
    receive_turn(ticket=ticket, role=turn_22.role, content=turn_22.content, boundary=turn_22.boundary)
    claim = CompactionEvent.objects.get(ticket=ticket, status="pending")

    context = ticket_context(ticket.ticket_id).as_json()
    pending = context["compaction_pending"]
    assert pending["number"] == claim.number and pending["upto_turn"] == 22 and pending["running"] is False
    assert (
        datetime.fromisoformat(pending["since"]) == claim.created_at
    )  # an aware ISO time, to the microsecond
    assert context["summary"] is None

    call_command("db_worker", "--batch", "--no-startup-delay", stdout=StringIO(), stderr=StringIO())
    context = ticket_context(ticket.ticket_id).as_json()
    assert context["compaction_pending"] is None
    assert context["summary"] is not None and context["summary_covers_turns"][1] <= 21
