"""The desk's OpenTelemetry spans, read with the SDK's in-memory exporter: a compaction (claim, summarizer
call, apply) and a refused repeat, as children of the agent's `traceparent`; and a collector that is down
costs a request nothing (the OTLP exporter is batched, in a background thread)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sundry_desk_client import DeskClient, RepeatRefused

from compaction.models import CompactionEvent
from tests.clients.conftest import open_t40118
from tickets import telemetry
from tickets.models import TicketClass

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{AGENT_SPAN}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)
    yield exporter
    telemetry.configure(None)
    provider.shutdown()


def traced_client(desk_url: str, desk_token: str) -> DeskClient:
    return DeskClient(desk_url, desk_token, headers={"traceparent": TRACEPARENT}, backoff=0.01)


def by_name(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_compaction_gives_claim_summarizer_and_apply_spans_under_the_agents_trace(
    client: DeskClient, desk_url: str, desk_token: str, small_class: TicketClass, spans: InMemorySpanExporter
) -> None:
    ticket_id = open_t40118(client, ticket_class="small-1k")
    with traced_client(desk_url, desk_token) as agent:
        agent.record_action(ticket_id, tool="issue_refund", item="garden-table", amount_cents=4000)
        for day in range(12):
            agent.append_turn(ticket_id, role="customer", content=f"Day {day}: where is my parasol? " * 6)
            answer = agent.append_turn(
                ticket_id,
                role="agent",
                content=f"Day {day}: the parasol is in transit at the Leeds hub. " * 6,
                boundary="reply_sent",
            )
            if answer.compaction.status in ("applied", "forced"):
                break
    applied = [e for e in client.compactions(ticket_id) if e.status in ("applied", "forced")]
    assert applied, [e.status for e in client.compactions(ticket_id)]
    event = applied[0]

    claim = [
        s
        for s in by_name(spans, "sundry.compaction.claim")
        if s.attributes["sundry.compaction.number"] == event.number
    ]
    chat = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    apply = [
        s
        for s in by_name(spans, "sundry.compaction.apply")
        if s.attributes["sundry.compaction.number"] == event.number
    ]
    assert len(claim) == 1 and chat and len(apply) == 1
    for span in (claim[0], chat[0], apply[0]):
        # linked to the agent's turn: same trace, the agent's span as parent
        assert format(span.context.trace_id, "032x") == TRACE_ID
        assert span.parent is not None and format(span.parent.span_id, "016x") == AGENT_SPAN
        assert span.attributes["gen_ai.conversation.id"] == ticket_id
    call = chat[0]
    assert call.kind.name == "CLIENT"
    assert call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.provider.name"] == "sundry.extractive"
    stored = CompactionEvent.objects.get(ticket__ticket_id=ticket_id, number=event.number)
    assert call.attributes["gen_ai.usage.input_tokens"] == stored.summarizer_input_tokens
    assert call.attributes["gen_ai.usage.output_tokens"] == stored.summarizer_output_tokens
    assert call.attributes["gen_ai.request.model"] == (stored.summarizer_model or stored.summarizer_backend)
    assert call.attributes["sundry.compaction.attempts"] == 1
    done = apply[0].attributes
    assert done["sundry.compaction.status"] == event.status
    assert done["sundry.compaction.tokens_before"] == event.tokens_before
    assert done["sundry.compaction.tokens_after"] == event.tokens_after < event.tokens_before
    assert done["sundry.compaction.latency_ms"] >= 0 and "sundry.compaction.cost_usd" in done
    assert done["sundry.coverage.missing_count"] == stored.coverage_missing_count
    assert apply[0].status.is_ok


def test_a_refused_repeat_is_an_execute_tool_span_naming_the_earlier_action(
    client: DeskClient,
    desk_url: str,
    desk_token: str,
    standard_class: TicketClass,
    spans: InMemorySpanExporter,
) -> None:
    ticket_id = open_t40118(client)
    with traced_client(desk_url, desk_token) as agent:
        first = agent.reserve_intent(ticket_id, tool="issue_refund", item="garden-table", amount_cents=4000)
        agent.settle_intent(ticket_id, first.action.id, succeeded=True)
        with pytest.raises(RepeatRefused):
            agent.reserve_intent(ticket_id, tool="issue_refund", item="Garden_Table", amount_cents=4000)
    decisions = by_name(spans, "execute_tool issue_refund")
    assert [s.attributes["sundry.guard.decision"] for s in decisions] == ["allowed", "refused"]
    allowed, refused = decisions
    assert allowed.attributes["sundry.guard.action_id"] == first.action.id
    assert allowed.attributes["sundry.guard.status"] == "intended" and allowed.status.is_ok
    assert refused.attributes["gen_ai.operation.name"] == "execute_tool"
    assert refused.attributes["gen_ai.tool.name"] == "issue_refund"
    assert refused.attributes["sundry.guard.earlier_action_id"] == first.action.id
    assert refused.attributes["sundry.guard.amount_cents"] == 4000
    assert refused.attributes["error.type"] == "repeat_refused"
    assert format(refused.parent.span_id, "016x") == AGENT_SPAN


def test_without_a_traceparent_the_spans_start_their_own_trace(
    client: DeskClient, standard_class: TicketClass, spans: InMemorySpanExporter
) -> None:
    ticket_id = open_t40118(client)
    client.record_action(ticket_id, tool="issue_refund", item="garden-table", amount_cents=4000)
    (span,) = by_name(spans, "execute_tool issue_refund")
    assert span.parent is None


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_tracing_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert telemetry.provider_from_env() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert telemetry.provider_from_env() is None


def test_a_dead_collector_costs_a_request_nothing(
    client: DeskClient, standard_class: TicketClass, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTLP export on (by the standard variables) towards a port nothing listens on: the refused repeat is
    answered as always, its span waits in the batch processor's queue, and exporting it later fails in the
    background without reaching the request."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # nothing is exported until flushed
    provider = telemetry.provider_from_env()
    assert provider is not None
    processors = provider._active_span_processor._span_processors
    assert [type(p) for p in processors] == [BatchSpanProcessor]
    telemetry.configure(provider)
    try:
        ticket_id = open_t40118(client)
        client.record_action(ticket_id, tool="issue_refund", item="garden-table", amount_cents=4000)
        with pytest.raises(RepeatRefused) as refused:
            client.record_action(ticket_id, tool="issue_refund", item="garden-table", amount_cents=4000)
        assert refused.value.status == 409 and client.state(ticket_id).refunded_cents_total == 4000
        # The spans were made and are queued; the export to the dead collector fails off the request path.
        assert processors[0]._batch_processor._queue  # type: ignore[attr-defined]
        provider.force_flush(timeout_millis=3000)
    finally:
        telemetry.configure(None)
        provider.shutdown()
    # The desk still answers after the failed export.
    assert client.get_ticket(ticket_id).ticket_id == ticket_id
