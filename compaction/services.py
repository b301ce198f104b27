"""Compaction writes, in three steps that never hold the ticket while a model thinks.

1. `decide` runs inside the turn's transaction: is compaction due, is this a safe moment, must the hard
   ceiling force it? It claims the turn by creating a `pending` event (the unique constraints make the
   claim decisive: one per turn, one queued per ticket), or joins the ticket's queued one, or records a
   deferral or an over-budget event.
2. `run_compaction` takes the claimed event, reads the window and calls the summarizer with no
   transaction open and no lock held, all attempts inside one deadline.
3. It then applies the summary in a short locked transaction that re-checks that the window is
   unchanged; if another compaction got there first, the result is recorded as `superseded`.

One module although over 400 lines: the three steps share one claimed event, its lease and its
figures; split, the claim's rules would be read in two places.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q, Sum
from django.utils import timezone
from pydantic import ValidationError

from compaction.models import CompactionEvent, ContextSnapshot
from compaction.queue_figures import ticket_figures_event_recorded
from compaction.selectors import active_compaction, assemble_context, pending_compaction
from compaction.summarizers import SummarizerError, SummaryRequest, get_summarizer
from core.context import summary_message
from core.coverage import check_coverage
from core.policy import (
    CutPlan,
    Room,
    TurnInfo,
    at_boundary,
    complete_prefix,
    is_due,
    plan_cut,
    summary_estimate,
)
from core.summary import Summary, parse_summary
from core.tokens import RequestSize, count_message
from core.vocabulary import CompactionStatus, TurnOutcome
from notify import events as notify_events
from tickets import telemetry
from tickets.errors import describe_validation_error
from tickets.models import PinnedState, Ticket, TicketClass, Turn
from tickets.services.context_size import set_context_tokens

logger = logging.getLogger(__name__)

ATTEMPTS = 3
MILLION = Decimal(1_000_000)
# After a failure, a ticket's next boundaries wait (the hard ceiling does not): the wait doubles with each
# failure in a row, counted in turns or in time, whichever comes first.
BACKOFF_TURNS = 4
BACKOFF_SECONDS = 60
# A running event with no lease (written before leases existed) is abandoned this long after it started.
STALE_RUN = timedelta(minutes=5)


def abandoned(event: CompactionEvent) -> bool:
    """A running compaction whose run is gone (killed, out of memory): its lease expired, so it may be retaken."""
    if event.status != CompactionStatus.RUNNING:
        return False
    now = timezone.now()
    if event.lease_expires_at is not None:
        return event.lease_expires_at < now
    return event.started_at is None or event.started_at < now - STALE_RUN


@dataclass(frozen=True)
class PolicyOutcome:
    """What the policy did with a turn: the status the turn answer reports, and the event behind it.

    Statuses: `TurnOutcome` (queued: a worker will run it).
    """

    status: TurnOutcome
    event: CompactionEvent | None = None
    reason: str = ""
    # The system prompt and pinned state alone reach the threshold: compacting turns cannot help.
    state_over_threshold: bool = False
    # The pinned state leaves less room under the threshold than one compaction must free (core.policy.Room).
    state_crowded: bool = False
    # low_gain: what the compaction would have freed and what it had to.
    expected_gain: int | None = None
    min_gain: int | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.state_over_threshold:
            out["state_over_threshold"] = True
        if self.state_crowded:
            out["state_crowded"] = True
        if self.expected_gain is not None:
            out["expected_gain"] = self.expected_gain
            out["min_gain"] = self.min_gain
        event = self.event
        if event is None:
            return out
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
        if event.reason and "reason" not in out:
            out["reason"] = event.reason
        if event.status in (CompactionStatus.PENDING, CompactionStatus.RUNNING):
            out["pending_since"] = event.created_at.isoformat()
            out["upto_turn"] = event.upto_turn
            out["running"] = event.status == CompactionStatus.RUNNING
        return out


@dataclass(frozen=True)
class Decision:
    """Step 1's verdict. `run_now` asks the caller to run the claimed event before answering the turn."""

    outcome: PolicyOutcome
    claimed: CompactionEvent | None = None
    run_now: bool = False


def _window(ticket: Ticket, first_active_turn: int, *, upto: int | None = None) -> list[TurnInfo]:
    rows = Turn.objects.filter(ticket=ticket, number__gte=first_active_turn)
    if upto is not None:
        rows = rows.filter(number__lte=upto)
    return [
        TurnInfo(number=n, role=r, tokens=t, boundary=b, tool_call_id=c, tool=tool)
        for n, r, t, b, c, tool in rows.order_by("number").values_list(
            "number", "role", "tokens", "boundary", "tool_call_id", "tool"
        )
    ]


def _next_number(ticket: Ticket) -> int:
    return (CompactionEvent.objects.filter(ticket=ticket).aggregate(n=Max("number"))["n"] or 0) + 1


def _backing_off(ticket: Ticket, turn: Turn) -> str:
    """Why the next try waits after failures, or "" when it may go ahead."""
    recent = list(
        CompactionEvent.objects.filter(ticket=ticket)
        .exclude(status__in=[CompactionStatus.DEFERRED, CompactionStatus.OVER_BUDGET])
        .order_by("-number")
        .only("status", "at_turn", "created_at")[:8]
    )
    failures = 0
    for event in recent:
        if event.status != CompactionStatus.FAILED:
            break
        failures += 1
    if not failures:
        return ""
    last = recent[0]
    wait_turns = BACKOFF_TURNS * 2 ** (failures - 1)
    wait = timedelta(seconds=BACKOFF_SECONDS * 2 ** (failures - 1))
    if turn.number - last.at_turn >= wait_turns or timezone.now() - last.created_at >= wait:
        return ""
    return (
        f"backing off after {failures} failed compaction(s) in a row: next try from turn "
        f"{last.at_turn + wait_turns} or {(last.created_at + wait).isoformat(timespec='seconds')}"
    )


def _record_once(*, ticket: Ticket, turn: Turn, status: str, total: int, reason: str) -> CompactionEvent:
    """One deferred (or over-budget) event per stretch: a later turn of the same stretch reuses it."""
    latest = CompactionEvent.objects.filter(ticket=ticket).order_by("-number").first()
    if latest is not None and latest.status == status:
        return latest
    ticket_class = ticket.ticket_class
    event = CompactionEvent.objects.create(
        ticket=ticket,
        number=_next_number(ticket),
        at_turn=turn.number,
        status=status,
        reason=reason,
        tokens_before=total,
        threshold_tokens=ticket_class.threshold_tokens,
        token_budget=ticket_class.token_budget,
    )
    ticket_figures_event_recorded(event=event)
    return event


def _claim(*, ticket: Ticket, turn: Turn, total: int, reason: str = "") -> CompactionEvent | None:
    ticket_class = ticket.ticket_class
    try:
        with transaction.atomic():
            claimed = CompactionEvent.objects.create(
                ticket=ticket,
                number=_next_number(ticket),
                at_turn=turn.number,
                upto_turn=turn.number,
                status=CompactionStatus.PENDING,
                reason=reason,
                tokens_before=total,
                threshold_tokens=ticket_class.threshold_tokens,
                token_budget=ticket_class.token_budget,
                summarizer_backend=ticket_class.summarizer_backend,
                summarizer_model=ticket_class.summarizer_model,
            )
            ticket_figures_event_recorded(event=claimed)
            return claimed
    except IntegrityError:
        return None  # this turn already compacted, or another claim is pending: the constraints decided


def state_room(ticket: Ticket, state_tokens: int | None = None) -> Room:
    """What the ticket's threshold leaves a compaction (core.policy.Room), from the stored counts. Reads the
    pinned state's count unless given (the queue selects it with the ticket)."""
    ticket_class = ticket.ticket_class
    if state_tokens is None:
        state_tokens = PinnedState.objects.filter(ticket=ticket).values_list("tokens", flat=True).first() or 0
    return Room(
        floor=RequestSize(system=ticket.system_prompt_tokens, state=state_tokens).floor,
        threshold=ticket_class.threshold_tokens,
        min_gain=ticket_class.min_gain_tokens,
    )


def _state_over_threshold(ticket: Ticket, room: Room, *, over_budget: bool) -> str:
    """Why compacting cannot help, or "": the parts no compaction replaces (system prompt, pinned state,
    framing) already reach the threshold, and either the request is within the budget or they exceed that too."""
    ticket_class = ticket.ticket_class
    if not room.state_over_threshold or (over_budget and room.floor < ticket_class.token_budget):
        return ""
    return (
        f"the system prompt and pinned state alone are {room.floor} tokens, at or over the "
        f"{ticket_class.threshold_tokens}-token threshold: compacting turns cannot bring the request under it "
        "(raise the class budget or trim the state)"
    )


def _boundary_plan(ticket: Ticket, window: list[TurnInfo], summary_tokens: int) -> CutPlan:
    """The cut `_run` would make at this boundary (the same inputs, from the stored counts), and its gain."""
    ticket_class = ticket.ticket_class
    estimate = summary_estimate(summary_tokens)
    window_tokens = sum(t.tokens for t in window)
    # Everything but the window after the compaction: the request now less the turns and the old summary,
    # plus the new summary's estimate.
    other = ticket.context_tokens - window_tokens - summary_tokens + estimate
    return plan_cut(
        window,
        keep_recent_tokens=ticket_class.effective_keep_recent_tokens,
        other_tokens=other,
        threshold_tokens=ticket_class.threshold_tokens,
        forced=False,
        summary_tokens=summary_tokens,
        min_gain_tokens=ticket_class.min_gain_tokens,
    )


def _low_gain(ticket: Ticket, plan: CutPlan, room: Room) -> PolicyOutcome:
    """The answer for a boundary whose compaction would not pay: nothing claimed, no summarizer call."""
    ticket_class = ticket.ticket_class
    budget = ticket_class.token_budget
    minimum = ticket_class.min_gain_tokens
    share = f"{ticket_class.min_gain_share:g} of the {budget}-token budget"
    if room.crowded:
        reason = (
            f"the pinned state leaves too little room: the system prompt and pinned state are {room.floor} of the "
            f"{room.threshold}-token threshold, so a compaction made at the threshold frees at most about "
            f"{max(room.best_gain, 0)} tokens (a summary takes the place of what it replaces), less than the "
            f"class's {minimum}-token minimum gain ({share}). This one would free about {plan.freed}: none runs "
            f"until one frees {minimum}, the request runs over the threshold meanwhile, and the hard ceiling "
            "still compacts past the budget (trim the state or raise the class budget)"
        )
    else:
        reason = (
            f"not worth a summarizer call: a compaction now would free about {plan.freed} tokens, under the "
            f"class's {minimum}-token minimum gain ({share}); it runs at a later boundary once it pays, and "
            "the hard ceiling still compacts past the budget"
        )
    return PolicyOutcome(
        status=TurnOutcome.LOW_GAIN,
        reason=reason,
        state_crowded=room.crowded,
        expected_gain=plan.freed,
        min_gain=minimum,
    )


def not_due_up_to(ticket_class: TicketClass) -> int:
    """The largest request, in tokens, on which the policy is not due for this class (`is_due` is false at it and
    true past it). A turn that leaves its ticket at or under it needs no decision under the ticket's row lock:
    `decide` answers it not_due without reading anything (the turn's own statement may be its transaction)."""
    return ticket_class.threshold_tokens


def decide(*, ticket: Ticket, turn: Turn) -> Decision:
    """Step 1, inside the turn's transaction (the ticket row is locked by the append), or after the turn's own
    statement when it left the ticket at or under `not_due_up_to` (then it only answers not_due).

    Due on tokens; at a boundary, claim (or join the pending claim); past the budget itself with no
    boundary, force a compaction of what is complete now; with no safe cut, record `over_budget`.
    """
    # The append (and the state changes made with the turn) kept the caller's ticket current under the lock.
    current = ticket.context_tokens
    ticket_class = ticket.ticket_class
    if not is_due(current, ticket_class.threshold_tokens):
        return Decision(PolicyOutcome(status=TurnOutcome.NOT_DUE))
    over_budget = current > ticket_class.token_budget
    room = state_room(ticket)
    futile = _state_over_threshold(ticket, room, over_budget=over_budget)
    if futile:
        return Decision(PolicyOutcome(status=TurnOutcome.NOT_DUE, reason=futile, state_over_threshold=True))
    decision = _decide_due(ticket=ticket, turn=turn, current=current, over_budget=over_budget, room=room)
    if room.crowded and not decision.outcome.state_crowded:
        # Whatever was done, the answer says the state leaves too little room (the queue flags it too).
        decision = replace(decision, outcome=replace(decision.outcome, state_crowded=True))
    return decision


def _decide_due(*, ticket: Ticket, turn: Turn, current: int, over_budget: bool, room: Room) -> Decision:
    """`decide` for a due request whose state leaves compaction something to do."""
    ticket_class = ticket.ticket_class
    queued = CompactionEvent.objects.filter(ticket=ticket, status=CompactionStatus.PENDING).first()
    running = None if queued else pending_compaction(ticket)
    active = active_compaction(ticket)
    window = _window(ticket, (active.last_replaced_turn or 0) + 1 if active else 1)
    boundary = at_boundary(window)

    if queued is not None:
        # Later boundaries join the queued claim: when it runs it compacts up to the newest of them.
        if boundary or over_budget:
            queued.upto_turn = turn.number
            queued.save(update_fields=["upto_turn"])
        # Past the budget, the hard ceiling holds whatever the backend: run it now rather than wait for the worker.
        return Decision(
            PolicyOutcome(status=TurnOutcome.QUEUED, event=queued), claimed=queued, run_now=over_budget
        )
    if running is not None and abandoned(running) and (boundary or over_budget):
        # Its run is gone (the lease expired): this boundary retakes it, inline or queued again for a worker.
        return Decision(
            PolicyOutcome(status=TurnOutcome.QUEUED, event=running), claimed=running, run_now=over_budget
        )
    if running is not None and not over_budget:
        # A run is under way; it will bring the request down. Boundaries after it claim anew once it is done.
        return Decision(PolicyOutcome(status=TurnOutcome.QUEUED, event=running))

    if boundary:
        wait = "" if over_budget else _backing_off(ticket, turn)
        if wait:
            return Decision(PolicyOutcome(status=TurnOutcome.DEFERRED, reason=wait))
        if not over_budget:
            # Only when it pays: a compaction that frees a few hundred tokens is not worth a model call.
            plan = _boundary_plan(ticket, window, active.summary_tokens if active else 0)
            if not plan.pays:
                return Decision(_low_gain(ticket, plan, room))
        claimed = telemetry.compaction_claimed(_claim(ticket=ticket, turn=turn, total=current))
        if claimed is None:
            return Decision(PolicyOutcome(status=TurnOutcome.NOT_DUE))
        return Decision(
            PolicyOutcome(status=TurnOutcome.QUEUED, event=claimed), claimed=claimed, run_now=over_budget
        )

    if over_budget:
        if complete_prefix(window) == 0:
            reason = (
                f"the request is {current} tokens, over the {ticket_class.token_budget}-token budget, and "
                "no safe cut exists: every turn since the last compaction belongs to an unfinished tool exchange"
            )
            event = _record_once(
                ticket=ticket, turn=turn, status=CompactionStatus.OVER_BUDGET, total=current, reason=reason
            )
            notify_events.record_compaction(event)
            return Decision(PolicyOutcome(status=TurnOutcome.OVER_BUDGET, event=event, reason=reason))
        reason = f"hard ceiling: {current} tokens exceed the {ticket_class.token_budget}-token budget before a boundary"
        claimed = telemetry.compaction_claimed(_claim(ticket=ticket, turn=turn, total=current, reason=reason))
        if claimed is None:
            return Decision(PolicyOutcome(status=TurnOutcome.NOT_DUE))
        return Decision(
            PolicyOutcome(status=TurnOutcome.QUEUED, event=claimed), claimed=claimed, run_now=True
        )

    event = _record_once(
        ticket=ticket,
        turn=turn,
        status=CompactionStatus.DEFERRED,
        total=current,
        reason="due mid-decision: a tool exchange is unfinished or the turn completes no step",
    )
    return Decision(PolicyOutcome(status=TurnOutcome.DEFERRED, event=event))


def summarizer_cost(ticket_class: TicketClass, input_tokens: int, output_tokens: int) -> Decimal:
    return (
        Decimal(input_tokens) * ticket_class.summarizer_input_price
        + Decimal(output_tokens) * ticket_class.summarizer_output_price
    ) / MILLION


def _take(event_pk: int, deadline_seconds: float) -> CompactionEvent | None:
    """Move a queued event to running under a lease; None when another run holds it (or it has finished).

    A running event whose lease expired (its run was killed) is taken over. The lease covers the
    summarizer's deadline plus a grace for reading and applying, so a live run never loses it.
    """
    now = timezone.now()
    lease = timedelta(seconds=deadline_seconds + settings.SUNDRY_COMPACTION_LEASE_GRACE_SECONDS)
    taken = (
        CompactionEvent.objects.filter(pk=event_pk)
        .filter(
            Q(status=CompactionStatus.PENDING)
            | Q(status=CompactionStatus.RUNNING, lease_expires_at__lt=now)
            | Q(status=CompactionStatus.RUNNING, lease_expires_at=None, started_at__lt=now - STALE_RUN)
        )
        .update(status=CompactionStatus.RUNNING, started_at=now, lease_expires_at=now + lease)
    )
    if not taken:
        return None
    return CompactionEvent.objects.select_related("ticket__ticket_class").get(pk=event_pk)


def _finish(event: CompactionEvent, status: str, reason: str, fields: list[str]) -> CompactionEvent:
    event.status = status
    event.reason = reason
    event.finished_at = timezone.now()
    event.save(update_fields=["status", "reason", "finished_at", *fields])
    ticket_figures_event_recorded(event=event)
    telemetry.compaction_finished(event)
    notify_events.record_compaction(event)
    return event


def _summarize(
    request: SummaryRequest, event: CompactionEvent, deadline_seconds: float
) -> tuple[Summary | None, list[str]]:
    """Up to ATTEMPTS calls, all inside one deadline. Nothing here touches the database."""
    summarizer = get_summarizer(event.summarizer_backend)
    errors: list[str] = []
    started = time.monotonic()
    for attempt in range(1, ATTEMPTS + 1):
        remaining = deadline_seconds - (time.monotonic() - started)
        if remaining <= 0.05:
            errors.append(f"attempt {attempt}: not made, the {deadline_seconds:g}s deadline was reached")
            break
        event.attempts = attempt
        try:
            reply = summarizer.summarize(request, timeout=remaining)
        except SummarizerError as exc:
            errors.append(f"attempt {attempt}: {exc}")
            continue
        event.summarizer_input_tokens += reply.input_tokens
        event.summarizer_output_tokens += reply.output_tokens
        try:
            return parse_summary(reply.text), errors
        except ValidationError as exc:
            errors.append(f"attempt {attempt}: {describe_validation_error(exc)}")
    return None, errors


def run_compaction(*, event_pk: int, deadline_seconds: float | None = None) -> CompactionEvent:
    """Steps 2 and 3 for a claimed event. Call with no transaction open: the summarizer call holds nothing."""
    deadline = deadline_seconds or settings.SUNDRY_COMPACTION_DEADLINE_SECONDS
    event = _take(event_pk, deadline)
    if event is None:
        return CompactionEvent.objects.get(pk=event_pk)
    try:
        return _run(event, deadline)
    except BaseException as exc:
        # A crash, or the process told to exit (gunicorn's worker timeout raises SystemExit, Ctrl-C raises
        # KeyboardInterrupt): a failed event, never a claim left `running`. A kill the process cannot see
        # (SIGKILL) leaves the lease, which expires.
        logger.exception("compaction %s of %s crashed", event.number, event.ticket)
        event.validation_errors = [*event.validation_errors, f"crashed: {type(exc).__name__}: {exc}"]
        try:
            failed = _finish(event, CompactionStatus.FAILED, "the compaction crashed", ["validation_errors"])
        except Exception:
            logger.exception(
                "compaction %s of %s: the failure could not be recorded", event.number, event.ticket
            )
            raise exc from None
        if not isinstance(exc, Exception):
            raise
        return failed


def _run(event: CompactionEvent, deadline_seconds: float) -> CompactionEvent:
    ticket = event.ticket
    ticket_class = ticket.ticket_class
    # Read: the window as it stands, no lock.
    context = assemble_context(ticket)
    active_before = active_compaction(ticket)
    upto = event.upto_turn or event.at_turn
    window = [
        TurnInfo(
            number=t.number,
            role=t.role,
            tokens=t.tokens,
            boundary=t.boundary,
            tool_call_id=t.tool_call_id,
            tool=t.tool,
        )
        for t in context.turns
        if t.number <= upto
    ]
    later_tokens = sum(t.tokens for t in context.turns if t.number > upto)
    forced = not at_boundary(window)
    estimate = summary_estimate(context.tokens.summary)
    other = RequestSize(
        system=context.tokens.system, state=context.tokens.state, summary=estimate, turns=later_tokens
    ).total
    plan = plan_cut(
        window,
        keep_recent_tokens=ticket_class.effective_keep_recent_tokens,
        other_tokens=other,
        threshold_tokens=ticket_class.threshold_tokens,
        forced=forced,
    )
    messages = context.messages()
    event.tokens_before = context.tokens.total
    if plan.cut == 0:
        ContextSnapshot.objects.create(event=event, messages=messages, pinned_state=context.pinned_state)
        if forced:
            return _finish(
                event,
                CompactionStatus.OVER_BUDGET,
                "no safe cut: every turn since the last compaction belongs to an unfinished tool exchange",
                ["tokens_before"],
            )
        return _finish(
            event,
            CompactionStatus.FAILED,
            "nothing to replace: the recent tail alone fills the window",
            ["tokens_before"],
        )
    replaced = window[: plan.cut]
    replaced_numbers = {t.number for t in replaced}
    request = SummaryRequest(
        ticket_id=ticket.ticket_id,
        model=ticket_class.summarizer_model,
        pinned_state=context.pinned_state,
        previous_summary=context.summary,
        turns=[m for m in messages if m.get("turn") in replaced_numbers],
    )

    # Summarize: no transaction, no lock, one deadline for every attempt.
    started = time.perf_counter()
    summary, errors = _summarize(request, event, deadline_seconds)
    event.latency_ms = int((time.perf_counter() - started) * 1000)
    event.validation_errors = errors
    event.cost_usd = summarizer_cost(
        ticket_class, event.summarizer_input_tokens, event.summarizer_output_tokens
    )
    telemetry.summarizer_called(event, succeeded=summary is not None)
    spent = [
        "tokens_before",
        "attempts",
        "latency_ms",
        "validation_errors",
        "cost_usd",
        "summarizer_input_tokens",
        "summarizer_output_tokens",
    ]
    ContextSnapshot.objects.create(
        event=event,
        messages=messages,
        pinned_state=context.pinned_state,
        summary=summary.model_dump(mode="json") if summary else None,
    )
    if summary is None:
        return _finish(
            event, CompactionStatus.FAILED, f"no valid summary in {event.attempts} attempt(s)", spent
        )

    summary_json = summary.model_dump(mode="json")
    coverage = check_coverage(context.pinned_state, summary_json)
    event.summary = summary_json
    event.summary_tokens = count_message(summary_message(summary_json), ticket_class.encoding)
    event.coverage = coverage.as_json()
    event.coverage_missing_count = len(coverage.missing)
    event.first_replaced_turn = replaced[0].number
    event.last_replaced_turn = replaced[-1].number
    written = [*spent, "summary", "summary_tokens", "coverage", "coverage_missing_count"]

    # Apply: a short locked transaction that re-checks the window.
    with transaction.atomic():
        locked = Ticket.objects.select_for_update().get(pk=ticket.pk)
        mine = CompactionEvent.objects.filter(
            pk=event.pk, status=CompactionStatus.RUNNING, started_at=event.started_at
        ).exists()
        if not mine:
            # Taken over as stale by another run: that run records the outcome.
            return CompactionEvent.objects.get(pk=event.pk)
        active_now = active_compaction(locked)
        if (active_now.pk if active_now else None) != (active_before.pk if active_before else None):
            event.first_replaced_turn = event.last_replaced_turn = None
            return _finish(
                event,
                CompactionStatus.SUPERSEDED,
                f"compaction {active_now.number if active_now else '?'} replaced this window while the summarizer ran",
                written,
            )
        kept_tokens = (
            Turn.objects.filter(ticket=locked, number__gt=event.last_replaced_turn).aggregate(
                n=Sum("tokens")
            )["n"]
            or 0
        )
        before = locked.context_tokens
        after = RequestSize(
            system=locked.system_prompt_tokens,
            state=locked.pinned_state.tokens,
            summary=event.summary_tokens,
            turns=kept_tokens,
        ).total
        if after >= before:
            event.first_replaced_turn = event.last_replaced_turn = None
            return _finish(
                event,
                CompactionStatus.FAILED,
                f"not applied: the summary would not make the request smaller ({before} -> {after} tokens)",
                written,
            )
        event.tokens_before = before
        event.tokens_after = after
        set_context_tokens(ticket=locked, total=after)
        status = CompactionStatus.FORCED if forced else CompactionStatus.APPLIED
        reason = event.reason if forced else ""
        return _finish(
            event, status, reason, [*written, "first_replaced_turn", "last_replaced_turn", "tokens_after"]
        )
