"""The queue row's stored figures (Ticket.compaction_count and its event and refusal flags) equal what the
ticket's events say after each kind of event the services write, and the backfill fills them.

What the events say is worked out here in Python from the rows themselves, not with the SQL that keeps them.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import User

from compaction.models import CompactionEvent, CompactionReview
from compaction.queue_figures import ticket_figures_refresh
from compaction.reviews import compaction_review_record
from core.vocabulary import CompactionStatus
from desk.turns import receive_turn
from tests.factories import import_t40118
from tests.fake_openai import Reply
from tickets.errors import RepeatRefused
from tickets.models import RefusedAttempt, Ticket, TicketClass
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db

FIGURES = (
    "compaction_count",
    "has_coverage_miss",
    "has_failed",
    "has_forced",
    "has_no_safe_cut",
    "needs_review",
    "has_refused",
    "pending_deferral",
)
WORTH_REVIEW = {CompactionStatus.FORCED, CompactionStatus.OVER_BUDGET, CompactionStatus.FAILED}


def events_say(ticket: Ticket) -> dict[str, Any]:
    events = list(CompactionEvent.objects.filter(ticket=ticket).order_by("number"))
    reviewed = set(CompactionReview.objects.filter(event__ticket=ticket).values_list("event_id", flat=True))
    statuses = [e.status for e in events]
    return {
        "compaction_count": sum(s in CompactionStatus.replacing() for s in statuses),
        "has_coverage_miss": any(e.coverage_missing_count > 0 for e in events),
        "has_failed": CompactionStatus.FAILED in statuses,
        "has_forced": CompactionStatus.FORCED in statuses,
        "has_no_safe_cut": CompactionStatus.OVER_BUDGET in statuses,
        "needs_review": any(
            (e.coverage_missing_count > 0 or e.status in WORTH_REVIEW) and e.pk not in reviewed
            for e in events
        ),
        "has_refused": RefusedAttempt.objects.filter(ticket=ticket).exists(),
        "pending_deferral": bool(statuses) and statuses[-1] == CompactionStatus.DEFERRED,
    }


def stored(ticket: Ticket) -> dict[str, Any]:
    return Ticket.objects.filter(pk=ticket.pk).values(*FIGURES).get()


def test_a_deferral_then_an_applied_compaction(scenario: dict[str, Any]) -> None:
    ticket = import_t40118(scenario, until=21)
    assert stored(ticket) == events_say(ticket) == {**events_say(ticket), "pending_deferral": True}
    ticket = import_t40118({**scenario, "ticket_id": "T-WHOLE"})
    says = events_say(ticket)
    assert says["compaction_count"] >= 1 and not says["pending_deferral"]
    assert stored(ticket) == says


def test_a_coverage_miss_needs_review_until_reviewed(scenario: dict[str, Any], openai_server) -> None:
    with openai_server([Reply(content=json.dumps(scenario["lossy_summary_turns_1_14"]))]):
        ticket = import_t40118(scenario, backend="openai")
    says = events_say(ticket)
    assert says["has_coverage_miss"] and says["needs_review"] and says["compaction_count"] >= 1
    assert stored(ticket) == says
    boss = User.objects.create_user("boss")
    for event in CompactionEvent.objects.filter(ticket=ticket).worth_review():
        assert stored(ticket)["needs_review"]
        compaction_review_record(event=event, by=boss, verdict="fine", comment="")
        assert stored(ticket) == events_say(ticket)
    assert stored(ticket) == {**events_say(ticket), "needs_review": False, "has_coverage_miss": True}


def test_a_failed_compaction(scenario: dict[str, Any], openai_server) -> None:
    with openai_server([Reply(raw="not json at all {{{", content_type="application/json")]):
        ticket = import_t40118(scenario, backend="openai", until=22)
    says = events_say(ticket)
    assert says["has_failed"] and says["needs_review"] and says["compaction_count"] == 0
    assert stored(ticket) == says


def test_forced_and_over_budget_on_a_tiny_class_match_their_events_after_every_turn() -> None:
    klass = TicketClass.objects.create(
        slug="tiny-512", token_budget=512, compaction_threshold=0.5, keep_recent_tokens=40
    )
    ticket = open_ticket(ticket_id="T-TINY", order_id="SU-9", seller_type="marketplace", ticket_class=klass)
    seen: set[str] = set()
    messages = [f"Message {n}: where is my parcel? " * 10 for n in range(4)]
    messages.append("one long message that takes the request past the budget " * 40)
    for content in messages:
        receive_turn(ticket=ticket, role="customer", content=content)
        seen |= set(CompactionEvent.objects.filter(ticket=ticket).values_list("status", flat=True))
        assert stored(ticket) == events_say(ticket), seen
    # An unfinished tool exchange over the whole budget: no safe cut.
    stuck = open_ticket(ticket_id="T-STUCK", order_id="SU-9", seller_type="marketplace", ticket_class=klass)
    for n in range(2):
        receive_turn(
            ticket=stuck,
            role="tool_call",
            content="looking the parcel up in every depot, one by one " * 30,
            tool="track_parcel",
            args={"order": "SU-9", "n": n, "depots": [f"depot number {d} of the region" for d in range(60)]},
            tool_call_id=f"call-{n}",
        )
        seen |= set(CompactionEvent.objects.filter(ticket=stuck).values_list("status", flat=True))
        assert stored(stuck) == events_say(stuck), seen
    assert stored(stuck)["has_no_safe_cut"], (seen, Ticket.objects.get(pk=stuck.pk).context_tokens)
    assert {CompactionStatus.FORCED, CompactionStatus.OVER_BUDGET} <= seen
    assert stored(ticket)["needs_review"]


def test_a_refused_repeat_flags_the_ticket(ticket: Ticket) -> None:
    record_action(ticket=ticket, tool="issue_refund", item="kettle", amount_cents=1500, idempotency_key="k1")
    assert not stored(ticket)["has_refused"]
    for key in ("again", "and-again"):  # the second refusal keeps the flag as it is
        with pytest.raises(RepeatRefused):
            record_action(
                ticket=ticket, tool="Issue_Refund", item="Kettle ", amount_cents=1500, idempotency_key=key
            )
        assert stored(ticket) == events_say(ticket) == {**events_say(ticket), "has_refused": True}


def test_the_refresh_and_the_backfill_fill_what_the_events_say(
    scenario: dict[str, Any], openai_server
) -> None:
    """Figures wiped (as before the migration) are filled again from the events, by the migration's function."""
    with openai_server([Reply(content=json.dumps(scenario["lossy_summary_turns_1_14"]))]):
        ticket = import_t40118(scenario, backend="openai")
    record_action(ticket=ticket, tool="issue_refund", item="lamp", amount_cents=100, idempotency_key="l1")
    with pytest.raises(RepeatRefused):
        record_action(ticket=ticket, tool="issue_refund", item="lamp", amount_cents=100, idempotency_key="l2")
    other = open_ticket(
        ticket_id="T-QUIET", order_id="SU-1", seller_type="marketplace", ticket_class=ticket.ticket_class
    )
    says = events_say(ticket)
    assert says["has_refused"] and says["has_coverage_miss"] and says["compaction_count"] >= 1
    blank = dict.fromkeys(FIGURES, False) | {"compaction_count": 0}
    Ticket.objects.update(**blank)
    assert stored(ticket) == blank
    ticket_figures_refresh(tickets=Ticket.objects.filter(pk=ticket.pk))
    assert stored(ticket) == says
    Ticket.objects.update(**blank)
    migration = importlib.import_module("tickets.migrations.0021_h38_queue_event_figures")
    migration.fill_figures(django_apps, None)
    assert stored(ticket) == says
    assert stored(other) == events_say(other) == blank
