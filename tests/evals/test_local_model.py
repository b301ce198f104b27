"""The real local model in the loop: SmolLM2-135M behind llama-cpp-python's OpenAI-compatible server, reached
by the desk's `openai` backend with the official client. Real HTTP, real schema enforcement, real usage.

Marked `model`: `make test` deselects them; `make test-model` and CI run them with SUNDRY_REQUIRE_MODEL=1.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.test import override_settings

from compaction.models import CompactionEvent, CompactionStatus, ContextSnapshot
from core.coverage import check_coverage
from core.summary import Summary
from evals.local_model import models_answer
from tests.factories import import_t40118
from tickets.models import TicketClass

pytestmark = [pytest.mark.model]

# One compaction of a 135M model on two shared cores takes seconds to a minute; the desk's default deadline
# (10 s) is a production figure for a hosted model, not this one.
SLOW_MODEL = override_settings(SUNDRY_COMPACTION_DEADLINE_SECONDS=240, SUNDRY_SUMMARIZER_TIMEOUT_SECONDS=240)


def test_the_server_lists_the_model_it_serves(local_model) -> None:
    assert local_model.model in (models_answer(local_model.base_url) or [])


@pytest.mark.django_db
@SLOW_MODEL
def test_t40118_compacted_by_the_real_model_end_to_end(scenario: dict[str, Any], local_model) -> None:
    """The ticket's first compaction goes through the openai backend to the real model: the summary parses
    into the four fields, the event records the server's usage, the wall-clock latency and the cost at the
    class's prices, and the coverage check ran on what the model wrote."""
    # A 4,000-token budget: the window the summarizer reads fits SmolLM2's 8,192 tokens with room to answer.
    TicketClass.objects.create(
        slug="standard-8k",
        token_budget=4000,
        compaction_threshold=0.8,
        summarizer_backend="openai",
        summarizer_model=local_model.model,
        summarizer_input_price=Decimal("0.10"),
        summarizer_output_price=Decimal("0.40"),
    )
    ticket = import_t40118(scenario, backend="openai", until=22)

    event = CompactionEvent.objects.filter(ticket=ticket).exclude(status=CompactionStatus.DEFERRED).first()
    assert event is not None
    assert event.status in (CompactionStatus.APPLIED, CompactionStatus.FORCED), (
        event.status,
        event.reason,
        event.validation_errors,
    )
    Summary.model_validate(event.summary)  # what was stored is a schema-valid summary
    assert event.summarizer_input_tokens > 500  # the server counted the prompt it read (its own tokenizer)
    assert event.summarizer_output_tokens > 0
    assert event.latency_ms > 0
    expected_cost = (
        Decimal(event.summarizer_input_tokens) * Decimal("0.10")
        + Decimal(event.summarizer_output_tokens) * Decimal("0.40")
    ) / Decimal(1_000_000)
    assert event.cost_usd == expected_cost.quantize(Decimal("0.000001"))
    snapshot = ContextSnapshot.objects.get(event=event)
    assert event.coverage == check_coverage(snapshot.pinned_state, event.summary).as_json()
    assert event.coverage_missing_count == len(event.coverage["missing"])
    assert event.tokens_after < event.tokens_before
