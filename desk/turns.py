"""A turn arriving: the one place to read what happens when an agent (or the importer) posts a turn.

1. In one short, durable transaction (`transaction.atomic(durable=True)`: no caller can wrap it, so no
   caller can hold a lock while a model thinks): append the turn (tickets), apply what happens with it
   (the importer's state events), and run the compaction policy (compaction), which may claim a compaction.
   A turn that leaves the ticket under the policy's threshold (the API's usual turn: nothing applied with it,
   nothing for the policy to read or claim) is appended by one statement that is its own transaction, on
   PostgreSQL: no BEGIN and COMMIT of their own. Any other turn, or one that would pass the threshold after
   all, takes the transaction.
2. After commit: a worker backend gets the claim queued (`transaction.on_commit`); the immediate
   backend, or the hard ceiling whatever the backend, runs it now, with no transaction open, inside
   the compaction deadline, so the turn answer reports what it did.

`rehearse_turn` is the one exception, for writes that are rolled back (the importer's validation pass,
the evals): the same steps inside the caller's transaction, on a ticket no other session can see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.tasks import task_backends
from django.tasks.backends.immediate import ImmediateBackend

from compaction.models import CompactionEvent
from compaction.services import PolicyOutcome, decide, not_due_up_to
from compaction.tasks import compact_ticket_task
from core.vocabulary import TurnOutcome
from tickets.models import Ticket, Turn
from tickets.services.actors import SYSTEM, Actor
from tickets.services.turns import TurnAppended, append_turn, append_turn_up_to


@dataclass(frozen=True)
class TurnReceived:
    turn: Turn
    context_tokens: int
    threshold_tokens: int
    token_budget: int
    compaction: PolicyOutcome
    replayed: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn.number,
            "tokens": self.turn.tokens,
            "context_tokens": self.context_tokens,
            "threshold_tokens": self.threshold_tokens,
            "token_budget": self.token_budget,
            "compaction": self.compaction.as_json(),
        }


def compaction_runs_inline() -> bool:
    """The immediate backend runs a queued compaction at once; a worker backend runs it later."""
    return isinstance(task_backends[compact_ticket_task.backend], ImmediateBackend)


def receive_turn(
    *,
    ticket: Ticket,
    role: str,
    content: str = "",
    tool: str = "",
    args: dict[str, Any] | None = None,
    tool_call_id: str = "",
    boundary: str = "",
    extra: dict[str, Any] | None = None,
    idempotency_key: str = "",
    with_turn: Callable[[Turn], None] | None = None,
    by: Actor = SYSTEM,
    refuse_in_flight: bool = False,
) -> TurnReceived:
    """Append a turn, run the policy on it, and compact when due at a boundary or past the budget.

    `with_turn` runs in the turn's transaction, after the append and before the policy: the importer
    applies the state events that happen with the turn there, so they count toward the trigger.
    `refuse_in_flight` (the API): a retry whose Idempotency-Key is still being processed is refused at once
    rather than waiting to be replayed.
    """
    if with_turn is None and (refuse_in_flight or not idempotency_key) and _outermost():
        appended = append_turn_up_to(
            ticket=ticket,
            up_to_tokens=not_due_up_to(ticket.ticket_class),
            role=role,
            content=content,
            tool=tool,
            args=args,
            tool_call_id=tool_call_id,
            boundary=boundary,
            extra=extra,
            idempotency_key=idempotency_key,
            by=by,
        )
        if appended is not None:
            return _not_due(ticket, appended)
    return _receive(
        durable=True,
        ticket=ticket,
        role=role,
        content=content,
        tool=tool,
        args=args,
        tool_call_id=tool_call_id,
        boundary=boundary,
        extra=extra,
        idempotency_key=idempotency_key,
        with_turn=with_turn,
        by=by,
        refuse_in_flight=refuse_in_flight,
    )


def _outermost() -> bool:
    """No transaction is open but a test case's: where `transaction.atomic(durable=True)` could open one (the
    check is Django's own, in `Atomic.__enter__`), so a turn's single statement may be its own transaction."""
    blocks = connection.atomic_blocks
    return not blocks or getattr(blocks[-1], "_from_testcase", False)


def _not_due(ticket: Ticket, appended: TurnAppended) -> TurnReceived:
    """The answer to a turn appended on its own (`append_turn_up_to`), the policy's decision included."""
    if appended.replayed:
        return _replayed(ticket, appended.turn)
    decision = decide(ticket=ticket, turn=appended.turn)
    if decision.outcome.status != TurnOutcome.NOT_DUE or decision.claimed is not None:
        # The ceiling is the policy's own (not_due_up_to): under it, it decides nothing but not_due.
        raise RuntimeError(f"the policy was due at turn {appended.turn.number}, under its own threshold")
    return _received(ticket, appended.turn, decision.outcome)


def rehearse_turn(
    *,
    ticket: Ticket,
    role: str,
    content: str = "",
    tool: str = "",
    args: dict[str, Any] | None = None,
    tool_call_id: str = "",
    boundary: str = "",
    extra: dict[str, Any] | None = None,
    with_turn: Callable[[Turn], None] | None = None,
    by: Actor = SYSTEM,
    compact: bool = True,
) -> TurnReceived:
    """`receive_turn` inside the caller's transaction, which the caller rolls back: a rehearsal.

    Only for a ticket opened in that same transaction (no other session sees its rows, so none waits on its
    locks). `compact=False` skips the policy (the importer's validation pass: compaction never decides whether
    an event is accepted); otherwise a due compaction runs inline, in the transaction.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("rehearse_turn runs inside a transaction its caller rolls back; use receive_turn")
    return _receive(
        durable=False,
        ticket=ticket,
        role=role,
        content=content,
        tool=tool,
        args=args,
        tool_call_id=tool_call_id,
        boundary=boundary,
        extra=extra,
        with_turn=with_turn,
        by=by,
        compact=compact,
    )


def _receive(
    *,
    durable: bool,
    ticket: Ticket,
    role: str,
    content: str,
    tool: str,
    args: dict[str, Any] | None,
    tool_call_id: str,
    boundary: str,
    extra: dict[str, Any] | None,
    with_turn: Callable[[Turn], None] | None,
    by: Actor,
    idempotency_key: str = "",
    refuse_in_flight: bool = False,
    compact: bool = True,
) -> TurnReceived:
    with transaction.atomic(durable=durable):
        appended = append_turn(
            ticket=ticket,
            role=role,
            content=content,
            tool=tool,
            args=args,
            tool_call_id=tool_call_id,
            boundary=boundary,
            extra=extra,
            idempotency_key=idempotency_key,
            by=by,
            refuse_in_flight=refuse_in_flight,
        )
        if appended.replayed:
            return _replayed(ticket, appended.turn)
        if with_turn is not None:
            with_turn(appended.turn)
        if not compact:
            return _received(ticket, appended.turn, PolicyOutcome(status=TurnOutcome.NOT_DUE))
        decision = decide(ticket=ticket, turn=appended.turn)
        # A rehearsal runs its compactions in its own transaction: a worker would never see the claim.
        inline = compaction_runs_inline() or not durable
        if decision.claimed is not None and not decision.run_now and not inline:
            event_pk = decision.claimed.pk
            transaction.on_commit(lambda: compact_ticket_task.enqueue(event_pk=event_pk))

    outcome = decision.outcome
    if decision.claimed is not None and (decision.run_now or inline):
        if inline and durable:
            compact_ticket_task.enqueue(event_pk=decision.claimed.pk)
        else:
            compact_ticket_task.call(event_pk=decision.claimed.pk)
        event = CompactionEvent.objects.get(pk=decision.claimed.pk)
        outcome = PolicyOutcome(
            status=TurnOutcome.of_event(event.status), event=event, state_crowded=outcome.state_crowded
        )
        ticket.context_tokens = Ticket.objects.values_list("context_tokens", flat=True).get(pk=ticket.pk)
    return _received(ticket, appended.turn, outcome)


def _received(ticket: Ticket, turn: Turn, outcome: PolicyOutcome) -> TurnReceived:
    ticket_class = ticket.ticket_class
    return TurnReceived(
        turn=turn,
        context_tokens=ticket.context_tokens,
        threshold_tokens=ticket_class.threshold_tokens,
        token_budget=ticket_class.token_budget,
        compaction=outcome,
    )


def _replayed(ticket: Ticket, turn: Turn) -> TurnReceived:
    """The answer to a retried turn: the turn first stored, the figures it had, the compaction it caused."""
    event = CompactionEvent.objects.filter(ticket=ticket, at_turn=turn.number).first()
    outcome = (
        PolicyOutcome(status=TurnOutcome.of_event(event.status), event=event)
        if event
        else PolicyOutcome(status=TurnOutcome.NOT_DUE)
    )
    return TurnReceived(
        turn=turn,
        context_tokens=turn.context_tokens,
        threshold_tokens=turn.threshold_tokens,
        token_budget=turn.token_budget,
        compaction=outcome,
        replayed=True,
    )
