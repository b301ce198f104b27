"""OpenTelemetry spans for what the desk decides: compactions (claim, summarizer call, apply) and the guard's
decisions on irreversible actions, with the GenAI semantic conventions (`gen_ai.*`).

Off by default. `OTEL_TRACES_EXPORTER=otlp` turns on OTLP/HTTP export configured by the standard variables
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_HEADERS`,
`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`, `OTEL_SDK_DISABLED`...), read by the SDK itself.
Spans are exported in batches from a background thread, so a collector that is down never holds a request.
Without the opentelemetry packages installed every hook is a no-op.

A request that carries a W3C `traceparent` (the agent's span) gets the desk's spans as children of it
(`bind_trace_headers`, used by the desk's middleware), so a tracing tool shows the compaction under the
agent's turn. The hooks are one line at each call site and never raise.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

# A compaction.models.CompactionEvent (tickets, the bottom layer, does not import compaction).
CompactionEvent = Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # tracing is optional at run time
    trace = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

TRACER_NAME = "sundry.desk"
SERVICE_NAME = "sundry-desk"

_lock = threading.Lock()
_configured = False
_provider: Any = None


def _env_on() -> bool:
    exporters = {e.strip().lower() for e in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return "otlp" in exporters and not disabled


def provider_from_env() -> Any:
    """A TracerProvider exporting OTLP/HTTP in batches when `OTEL_TRACES_EXPORTER=otlp`; else None."""
    if trace is None or not _env_on():
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_TRACES_EXPORTER=otlp but opentelemetry-sdk / opentelemetry-exporter-otlp-proto-http are "
            "not installed: no traces"
        )
        return None
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def configure(provider: Any = None) -> None:
    """Use this TracerProvider for the desk's spans (tests pass one with an in-memory exporter); None goes
    back to the environment's configuration at the next span."""
    global _configured, _provider
    with _lock:
        _provider = provider
        _configured = provider is not None


def _tracer() -> Any:
    global _configured, _provider
    if trace is None:
        return None
    if not _configured:
        with _lock:
            if not _configured:
                _provider = provider_from_env()
                _configured = True
    # Without our own provider, the global one (a no-op unless an OpenTelemetry distro set one up).
    return trace.get_tracer(TRACER_NAME, tracer_provider=_provider)


@contextmanager
def bind_trace_headers(headers: Mapping[str, str]) -> Iterator[None]:
    """Within the block, spans are children of the caller's `traceparent` (W3C Trace Context), if any."""
    parent = headers.get("traceparent") if trace is not None else None
    if not parent:
        yield
        return
    carrier = {"traceparent": parent}
    if headers.get("tracestate"):
        carrier["tracestate"] = headers["tracestate"]
    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def _ns(moment: Any) -> int | None:
    return int(moment.timestamp() * 1e9) if moment is not None else None


def _span(
    name: str,
    attributes: dict[str, Any],
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    error: str = "",
    client: bool = False,
) -> None:
    """One finished span (the work it stands for has just happened). Never raises."""
    try:
        tracer = _tracer()
        if tracer is None:
            return
        clean = {k: v for k, v in attributes.items() if v is not None and v != ""}
        span = tracer.start_span(
            name, kind=SpanKind.CLIENT if client else SpanKind.INTERNAL, attributes=clean, start_time=start_ns
        )
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)
    except Exception:
        logger.exception("could not record the span %s", name)


def _compaction_attributes(event: CompactionEvent, operation: str) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": operation,
        "gen_ai.conversation.id": event.ticket.ticket_id,
        "sundry.ticket.id": event.ticket.ticket_id,
        "sundry.compaction.number": event.number,
        "sundry.compaction.at_turn": event.at_turn,
        "sundry.compaction.upto_turn": event.upto_turn,
        "sundry.compaction.status": event.status,
        "sundry.compaction.reason": event.reason,
        "sundry.compaction.tokens_before": event.tokens_before,
    }


# ---------------------------------------------------------------- hooks (one line at each call site)


def compaction_claimed[E](event: E) -> E:
    """compaction/services.py `decide`: the claim made in the turn's transaction (None: no claim, no span).
    Returns what it was given."""
    if event is None:
        return event
    _span(
        "sundry.compaction.claim",
        {
            **_compaction_attributes(event, "sundry.compaction.claim"),
            "sundry.compaction.threshold_tokens": getattr(event, "threshold_tokens", None),
            "sundry.compaction.token_budget": getattr(event, "token_budget", None),
        },
    )
    return event


def summarizer_called(event: CompactionEvent, *, succeeded: bool) -> None:
    """compaction/services.py `_run`, after the summarizer's attempts: one GenAI `chat` client span for
    them (model, provider, usage, attempts; `error.type` when no valid summary came back)."""
    end = time.time_ns()
    start = end - int((event.latency_ms or 0) * 1e6)
    model = event.summarizer_model or event.summarizer_backend
    _span(
        f"chat {model}",
        {
            **_compaction_attributes(event, "chat"),
            "gen_ai.provider.name": "openai" if event.summarizer_backend == "openai" else "sundry.extractive",
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": event.summarizer_input_tokens,
            "gen_ai.usage.output_tokens": event.summarizer_output_tokens,
            "sundry.compaction.attempts": event.attempts,
            "sundry.compaction.cost_usd": float(event.cost_usd or 0),
            "sundry.compaction.latency_ms": event.latency_ms,
        },
        start_ns=start,
        end_ns=end,
        error="" if succeeded else "invalid_summary",
        client=True,
    )


def compaction_finished(event: CompactionEvent) -> None:
    """compaction/services.py `_finish`: the run's outcome (applied, superseded, failed...) from the moment
    it was taken to now, with tokens, cost, latency and what the coverage check found missing."""
    coverage = event.coverage if isinstance(event.coverage, dict) else {}
    missing = coverage.get("missing") or []
    missing_refs = [
        f"{m.get('category', '')}: {m.get('label') or m.get('id')}" if isinstance(m, dict) else str(m)
        for m in missing
    ]
    failed = event.status in ("failed", "over_budget")
    _span(
        "sundry.compaction.apply",
        {
            **_compaction_attributes(event, "sundry.compaction.apply"),
            "sundry.compaction.tokens_after": event.tokens_after,
            "sundry.compaction.summary_tokens": event.summary_tokens,
            "sundry.compaction.first_replaced_turn": event.first_replaced_turn,
            "sundry.compaction.last_replaced_turn": event.last_replaced_turn,
            "sundry.compaction.latency_ms": event.latency_ms,
            "sundry.compaction.cost_usd": float(event.cost_usd or 0),
            "gen_ai.usage.input_tokens": event.summarizer_input_tokens,
            "gen_ai.usage.output_tokens": event.summarizer_output_tokens,
            "sundry.coverage.missing_count": event.coverage_missing_count,
            "sundry.coverage.missing": missing_refs or None,
        },
        start_ns=_ns(event.started_at),
        end_ns=_ns(event.finished_at),
        error=event.status if failed else "",
    )


def guard_decision(
    *,
    ticket_id: str,
    tool: str,
    item: str,
    amount_cents: int,
    decision: str,
    status: str | None = None,
    action_id: str = "",
    earlier_action_id: str = "",
    message: str = "",
) -> None:
    """tickets/services/actions.py `record_action`: the guard allowed the action (or intent) or refused it
    as a repeat (naming the earlier action). A GenAI `execute_tool` span for the tool the agent asked for."""
    _span(
        f"execute_tool {tool}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": ticket_id,
            "sundry.ticket.id": ticket_id,
            "sundry.guard.decision": decision,
            "sundry.guard.item": item,
            "sundry.guard.amount_cents": amount_cents,
            "sundry.guard.status": status,
            "sundry.guard.action_id": action_id,
            "sundry.guard.earlier_action_id": earlier_action_id,
            "sundry.guard.message": message,
        },
        error="repeat_refused" if decision == "refused" else "",
    )
