"""The seed's lossy T-40118 summary, read as spans: the apply span names the refund the summary dropped, and
the summarizer's GenAI span carries the model's usage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from compaction.models import CompactionEvent, CompactionStatus
from tests.factories import import_t40118
from tests.fake_openai import Reply
from tickets import telemetry

pytestmark = pytest.mark.django_db


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)
    yield exporter
    telemetry.configure(None)
    provider.shutdown()


def test_the_lossy_summarys_coverage_miss_and_usage_are_on_the_spans(
    scenario: dict[str, Any], openai_server: Any, spans: InMemorySpanExporter
) -> None:
    with openai_server([Reply(content=json.dumps(scenario["lossy_summary_turns_1_14"]))]):
        ticket = import_t40118(scenario, backend="openai")
    event = CompactionEvent.objects.get(ticket=ticket, status=CompactionStatus.APPLIED)
    finished = spans.get_finished_spans()
    (apply,) = [
        s
        for s in finished
        if s.name == "sundry.compaction.apply" and s.attributes["sundry.compaction.number"] == event.number
    ]
    assert apply.attributes["sundry.coverage.missing_count"] == event.coverage_missing_count >= 1
    missing = list(apply.attributes["sundry.coverage.missing"])
    assert any(m.startswith("actions_taken: ") and "4000 cents garden-table" in m for m in missing), missing
    assert apply.attributes["sundry.compaction.tokens_after"] == event.tokens_after
    assert apply.attributes["sundry.compaction.cost_usd"] == pytest.approx(float(event.cost_usd))
    chat = [s for s in finished if s.name == f"chat {event.summarizer_model}"]
    assert chat and chat[-1].attributes["gen_ai.provider.name"] == "openai"
    assert chat[-1].attributes["gen_ai.usage.input_tokens"] == event.summarizer_input_tokens > 0
    claims = [s for s in finished if s.name == "sundry.compaction.claim"]
    assert event.number in [s.attributes["sundry.compaction.number"] for s in claims]
