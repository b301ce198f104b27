from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from django.test import override_settings

from compaction.models import CompactionEvent, ContextSnapshot
from compaction.selectors import assemble_context, context_figures
from compaction.services import run_compaction
from core.vocabulary import CompactionStatus
from tests.factories import import_t40118
from tests.fake_openai import Reply
from tickets.models import TicketClass

pytestmark = pytest.mark.django_db

VALID = {
    "decisions": [],
    "actions_taken": ["issue_refund of 4000 cents for garden-table at turn 6"],
    "customer_constraints": ["no replacement wanted"],
    "open_questions": ["photo of the second item (parasol) still outstanding"],
    "narrative": "Table scratched; partial refund issued; parasol tracked.",
}


def test_t40118_defers_at_turn_21_and_compacts_after_turn_22(scenario: dict[str, Any]) -> None:
    """The threshold is crossed on an unconsumed tool result; compaction waits for the next boundary."""
    ticket = import_t40118(scenario)
    events = list(CompactionEvent.objects.filter(ticket=ticket).order_by("number"))
    assert [(e.at_turn, e.status) for e in events] == [(21, "deferred"), (22, "applied")]
    deferred, applied = events
    assert deferred.tokens_before > deferred.threshold_tokens == 6400
    assert applied.first_replaced_turn == 1 and applied.last_replaced_turn >= 8
    assert applied.tokens_after < 6400 < applied.tokens_before
    context = assemble_context(ticket)
    assert context.tokens.total < 6400
    assert context.pinned_state["refunded_cents_total"] == 4000
    assert context.pinned_state["actions_taken"][0]["at_turn"] == 6
    assert next(t.number for t in context.turns) == applied.last_replaced_turn + 1
    assert applied.coverage["missing"] == []
    snapshot = ContextSnapshot.objects.get(event=applied)
    assert any(m.get("turn") == 6 for m in snapshot.messages)
    assert snapshot.summary == applied.summary


def test_turn_21_alone_is_deferred_not_compacted(scenario: dict[str, Any]) -> None:
    ticket = import_t40118(scenario, until=21)
    assert list(CompactionEvent.objects.filter(ticket=ticket).values_list("status", flat=True)) == [
        "deferred"
    ]
    assert context_figures(ticket).total > 6400


def test_the_seed_lossy_summary_is_flagged_for_the_missing_refund(
    scenario: dict[str, Any], openai_server
) -> None:
    lossy = scenario["lossy_summary_turns_1_14"]
    with openai_server([Reply(content=json.dumps(lossy))]) as fake:
        ticket = import_t40118(scenario, backend="openai")
    event = CompactionEvent.objects.get(ticket=ticket, status=CompactionStatus.APPLIED)
    missing = [m for m in event.coverage["missing"] if m["category"] == "actions_taken"]
    assert [m["id"] for m in missing] == ["A1"]
    assert "4000 cents garden-table" in missing[0]["label"]
    assert event.coverage_missing_count >= 1
    # The summarizer got the fixed template with a JSON schema, and the model from the class.
    request = fake.requests[0]["body"]
    assert request["model"] == "cheap-summarizer"
    assert request["response_format"]["type"] == "json_schema"
    # The refund is still pinned, whatever the summary says.
    assert assemble_context(ticket).pinned_state["refunded_cents_total"] == 4000


def test_invalid_replies_are_retried_and_the_third_applies(scenario: dict[str, Any], openai_server) -> None:
    no_questions = {k: v for k, v in VALID.items() if k != "open_questions"}
    replies = [
        Reply(content=json.dumps(no_questions)),
        Reply(content="{not json"),
        Reply(content=json.dumps(VALID)),
    ]
    with openai_server(replies) as fake:
        ticket = import_t40118(scenario, backend="openai")
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=22)
    assert event.status == CompactionStatus.APPLIED
    assert event.attempts == 3
    assert len(event.validation_errors) == 2
    assert "open_questions" in event.validation_errors[0]
    assert "attempt 2" in event.validation_errors[1]
    assert len(fake.requests) == 3
    assert event.summary["open_questions"] == VALID["open_questions"]
    assert event.summarizer_input_tokens == 3 * 900 and event.summarizer_output_tokens == 3 * 120
    klass = ticket.ticket_class
    expected = (
        Decimal(2700) * klass.summarizer_input_price + Decimal(360) * klass.summarizer_output_price
    ) / Decimal(1_000_000)
    assert event.cost_usd == expected.quantize(Decimal("0.000001"))


def test_a_summarizer_that_never_validates_fails_and_replaces_nothing(
    scenario: dict[str, Any], openai_server
) -> None:
    with openai_server([Reply(content='{"narrative": "fine"}')]) as fake:
        ticket = import_t40118(scenario, backend="openai", until=22)
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=22)
    assert event.status == CompactionStatus.FAILED
    assert event.attempts == 3 and len(fake.requests) == 3
    assert event.first_replaced_turn is None and event.summary is None
    context = assemble_context(ticket)
    assert context.summary is None
    assert [t.number for t in context.turns] == list(range(1, 23))
    assert context.tokens.total > 6400  # left uncompacted: nothing lost
    assert ContextSnapshot.objects.get(event=event).summary is None


@override_settings(SUNDRY_SUMMARIZER_TIMEOUT_SECONDS=0.3)
def test_a_timeout_is_a_failed_attempt(scenario: dict[str, Any], openai_server) -> None:
    with openai_server([Reply(content=json.dumps(VALID), delay=1.0)]):
        ticket = import_t40118(scenario, backend="openai", until=22)
    event = CompactionEvent.objects.get(ticket=ticket, at_turn=22)
    assert event.status == CompactionStatus.FAILED
    assert event.attempts == 3
    assert all("timed out" in e for e in event.validation_errors)


def test_a_turn_compacts_at_most_once(scenario: dict[str, Any]) -> None:
    ticket = import_t40118(scenario, until=22)
    first = CompactionEvent.objects.get(ticket=ticket, at_turn=22)
    again = run_compaction(event_pk=first.pk)
    assert again.pk == first.pk and again.status == "applied" and again.attempts == first.attempts
    assert CompactionEvent.objects.filter(ticket=ticket, status="applied").count() == 1


def test_a_second_compaction_folds_the_previous_summary_in(scenario: dict[str, Any]) -> None:
    TicketClass.objects.create(slug="standard-8k", token_budget=3000, compaction_threshold=0.8)
    ticket = import_t40118(scenario)
    applied = list(CompactionEvent.objects.filter(ticket=ticket).applied().order_by("number"))
    assert len(applied) >= 2
    first, second = applied[0], applied[1]
    assert second.first_replaced_turn == first.last_replaced_turn + 1
    assert first.summary["narrative"][:40] in second.summary["narrative"]
    assert second.summary["actions_taken"] == ["A1"]  # the pinned refund, referred to by its id
