"""Compaction writes: the policy run after each turn, and the compaction itself."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.tasks import TaskResultStatus
from pydantic import ValidationError

from compaction.context import summary_message
from compaction.coverage import check_coverage
from compaction.models import CompactionEvent, CompactionStatus, ContextSnapshot
from compaction.policy import TurnInfo, at_boundary, choose_cut, is_due
from compaction.selectors import assemble_context, context_figures
from compaction.summarizers import SummarizerError, SummaryRequest, get_summarizer
from compaction.summary import Summary
from compaction.tokens import count_message
from tickets.models import Ticket, TicketClass, Turn

logger = logging.getLogger(__name__)

ATTEMPTS = 3
MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class PolicyOutcome:
    """What the policy did with a turn: not_due, deferred, applied, failed, or queued (worker backend)."""

    status: str
    event: CompactionEvent | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.event is not None:
            event = self.event
            out.update(
                {
                    "number": event.number,
                    "at_turn": event.at_turn,
                    "replaced_turns": (
                        [event.first_replaced_turn, event.last_replaced_turn]
                        if event.first_replaced_turn is not None
                        else None
                    ),
                    "tokens_before": event.tokens_before,
                    "tokens_after": event.tokens_after,
                    "coverage_missing": event.coverage.get("missing", []) if event.coverage else [],
                }
            )
        return out


def _window(ticket: Ticket, first_active_turn: int) -> list[TurnInfo]:
    rows = (
        Turn.objects.filter(ticket=ticket, number__gte=first_active_turn)
        .order_by("number")
        .values_list("number", "role", "tokens", "boundary", "tool_call_id")
    )
    return [TurnInfo(number=n, role=r, tokens=t, boundary=b, tool_call_id=c) for n, r, t, b, c in rows]


def _next_number(ticket: Ticket) -> int:
    return (CompactionEvent.objects.filter(ticket=ticket).aggregate(n=Max("number"))["n"] or 0) + 1


def run_policy(*, ticket: Ticket, turn: Turn) -> PolicyOutcome:
    """After a turn is stored: compact if due at a boundary, record a deferral if due mid-decision."""
    # The stored context size is current (every writer keeps it so), but the caller's instance may predate
    # state changes made with this turn: read the row, not the instance. No aggregate when not due.
    current = Ticket.objects.values_list("context_tokens", flat=True).get(pk=ticket.pk)
    ticket.context_tokens = current
    if not is_due(current, ticket.ticket_class.threshold_tokens):
        return PolicyOutcome(status="not_due")
    figures = context_figures(ticket)
    window = _window(ticket, figures.first_active_turn)
    if not at_boundary(window):
        return PolicyOutcome(
            status="deferred", event=_record_deferral(ticket=ticket, turn=turn, total=figures.total)
        )

    from compaction.tasks import compact_ticket_task

    result = compact_ticket_task.enqueue(ticket_pk=ticket.pk, at_turn=turn.number)
    if result.status == TaskResultStatus.READY or result.status == TaskResultStatus.RUNNING:
        return PolicyOutcome(status="queued")
    event = CompactionEvent.objects.filter(ticket=ticket, at_turn=turn.number).first()
    if event is None:
        if result.status == TaskResultStatus.FAILED:
            logger.error("compaction task for %s turn %s crashed: %s", ticket, turn.number, result.errors)
            return PolicyOutcome(status="failed")
        return PolicyOutcome(status="not_due")
    ticket.context_tokens = Ticket.objects.values_list("context_tokens", flat=True).get(pk=ticket.pk)
    return PolicyOutcome(status=event.status, event=event)


def _record_deferral(*, ticket: Ticket, turn: Turn, total: int) -> CompactionEvent:
    """One deferred event per stretch: a second mid-decision turn reuses the open deferral."""
    latest = CompactionEvent.objects.filter(ticket=ticket).order_by("-number").first()
    if latest is not None and latest.status == CompactionStatus.DEFERRED:
        return latest
    return CompactionEvent.objects.create(
        ticket=ticket,
        number=_next_number(ticket),
        at_turn=turn.number,
        status=CompactionStatus.DEFERRED,
        tokens_before=total,
        threshold_tokens=ticket.ticket_class.threshold_tokens,
    )


def summarizer_cost(ticket_class: TicketClass, input_tokens: int, output_tokens: int) -> Decimal:
    return (
        Decimal(input_tokens) * ticket_class.summarizer_input_price
        + Decimal(output_tokens) * ticket_class.summarizer_output_price
    ) / MILLION


@transaction.atomic
def compact_ticket(*, ticket: Ticket, at_turn: int) -> CompactionEvent | None:
    """Replace the old turns of the active window by a validated summary.

    Runs at most once per ticket and turn: the ticket row is locked and an existing event for the
    turn is returned as it is (the database's unique constraint backs this up). Returns None when
    compaction is no longer due (another compaction got there first).
    """
    locked = Ticket.objects.select_for_update().select_related("ticket_class").get(pk=ticket.pk)
    existing = CompactionEvent.objects.filter(ticket=locked, at_turn=at_turn).first()
    if existing is not None:
        return existing
    ticket_class = locked.ticket_class
    figures = context_figures(locked)
    if not is_due(figures.total, figures.threshold_tokens):
        return None

    window = _window(locked, figures.first_active_turn)
    window = [t for t in window if t.number <= at_turn]
    cut = choose_cut(window, ticket_class.effective_keep_recent_tokens)
    context = assemble_context(locked)
    previous_summary = context.summary
    event = CompactionEvent(
        ticket=locked,
        number=_next_number(locked),
        at_turn=at_turn,
        tokens_before=figures.total,
        threshold_tokens=figures.threshold_tokens,
        summarizer_backend=ticket_class.summarizer_backend,
        summarizer_model=ticket_class.summarizer_model,
    )
    snapshot_messages = context.messages()
    if cut == 0:
        event.status = CompactionStatus.FAILED
        event.validation_errors = ["nothing to replace: the recent tail alone fills the window"]
        return _save(event, snapshot_messages, context.pinned_state, None)

    replaced = window[:cut]
    replaced_numbers = {t.number for t in replaced}
    request = SummaryRequest(
        ticket_id=locked.ticket_id,
        model=ticket_class.summarizer_model,
        pinned_state=context.pinned_state,
        previous_summary=previous_summary,
        turns=[m for m in snapshot_messages if m.get("turn") in replaced_numbers],
    )
    summarizer = get_summarizer(ticket_class.summarizer_backend)
    summary: Summary | None = None
    errors: list[str] = []
    started = time.perf_counter()
    for attempt in range(1, ATTEMPTS + 1):
        event.attempts = attempt
        try:
            reply = summarizer.summarize(request)
        except SummarizerError as exc:
            errors.append(f"attempt {attempt}: {exc}")
            continue
        event.summarizer_input_tokens += reply.input_tokens
        event.summarizer_output_tokens += reply.output_tokens
        try:
            summary = Summary.model_validate_json(reply.text)
        except ValidationError as exc:
            errors.append(f"attempt {attempt}: {_describe(exc)}")
            continue
        break
    event.latency_ms = int((time.perf_counter() - started) * 1000)
    event.validation_errors = errors
    event.cost_usd = summarizer_cost(
        ticket_class, event.summarizer_input_tokens, event.summarizer_output_tokens
    )
    if summary is None:
        event.status = CompactionStatus.FAILED
        return _save(event, snapshot_messages, context.pinned_state, None)

    summary_json = summary.model_dump(mode="json")
    coverage = check_coverage(context.pinned_state, summary_json)
    event.status = CompactionStatus.APPLIED
    event.first_replaced_turn = replaced[0].number
    event.last_replaced_turn = replaced[-1].number
    event.summary = summary_json
    event.summary_tokens = count_message(summary_message(summary_json), ticket_class.encoding)
    event.coverage = coverage.as_json()
    event.coverage_missing_count = len(coverage.missing)
    return _save(event, snapshot_messages, context.pinned_state, summary_json)


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        location = ".".join(str(p) for p in error["loc"]) or "(root)"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


def _save(
    event: CompactionEvent,
    messages: list[dict[str, Any]],
    pinned_state: dict[str, Any],
    summary: dict[str, Any] | None,
) -> CompactionEvent:
    from tickets.services import refresh_context_tokens

    try:
        with transaction.atomic():
            event.save()
    except IntegrityError:
        # A concurrent run for the same turn won: its event is the one.
        return CompactionEvent.objects.get(ticket=event.ticket, at_turn=event.at_turn)
    ContextSnapshot.objects.create(event=event, messages=messages, pinned_state=pinned_state, summary=summary)
    if event.status == CompactionStatus.APPLIED:
        event.tokens_after = refresh_context_tokens(ticket=event.ticket)
        event.save(update_fields=["tokens_after"])
    return event
