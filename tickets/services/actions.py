"""Recording actions, with idempotency keys and the guard against a second irreversible action.

An agent reserves an irreversible action before its tool runs (`status="intended"`), so the guard can refuse
it while the money has not moved; it settles the intent afterwards (`settle_action`). A refused attempt is
kept as a `RefusedAttempt` although nothing else of the request is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import JSONField, OuterRef, QuerySet, Subquery, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from core.errors import InvalidInput
from core.state import ActionItem, StateItems
from core.vocabulary import ActionStatus, StateOp
from tickets.compiled_reads import CompiledRead
from tickets.errors import ActionAlreadySettled, ActionNotFound, IdempotencyKeyReused, RepeatRefused
from tickets.fingerprints import request_fingerprint
from tickets.models import IdempotencyRecord, PinnedState, RefusedAttempt, Ticket
from tickets.services.actors import SYSTEM, Actor
from tickets.services.idempotency import hold_key
from tickets.services.state_changes import change_pinned_state, check_turn


@dataclass(frozen=True)
class ActionRecorded:
    body: dict[str, Any]
    replayed: bool

    @property
    def action(self) -> dict[str, Any]:
        return self.body["action"]


def _answer(action: ActionItem, pinned: PinnedState) -> dict[str, Any]:
    """What an action request is answered with: the action, the state version and the money totals."""
    totals = pinned.items.totals()  # one pass over the actions for the three
    return {
        "action": action.model_dump(mode="json", exclude={"intended_at"}),
        "state_version": pinned.version,
        **{
            name: totals[name]
            for name in ("refunded_cents_total", "charged_cents_total", "credited_cents_total")
        },
    }


RECORDABLE_STATUSES = (ActionStatus.INTENDED, ActionStatus.SUCCEEDED)


def record_action(
    *,
    ticket: Ticket,
    tool: str,
    idempotency_key: str,
    item: str = "",
    amount_cents: int = 0,
    at_turn: int | None = None,
    reversible: bool = False,
    args: dict[str, Any] | None = None,
    repeat_of_earlier: bool = False,
    reason: str = "",
    status: str | None = None,
    by: Actor = SYSTEM,
    refuse_in_flight: bool = False,
) -> ActionRecorded:
    """Record an action: reserve it before its tool runs (`status="intended"`), or record one that succeeded.

    The same idempotency key with the same body returns the first result; with another body it is
    refused. A second irreversible action with the same identity (tool and item, however spelled) as one
    that still holds its item is refused, naming the earlier one, unless the caller says it is a deliberate
    repeat and gives a reason. The refusal is kept (`RefusedAttempt`): nothing of the request is written,
    the refusal is, after the checking transaction, in the caller's transaction (or on its own when there
    is none). A request with the same key still in flight waits for it and gets its replay; with
    `refuse_in_flight` (the API, as the Idempotency-Key draft wants) it is refused at once instead
    (IdempotencyKeyInFlight).
    """
    outcome = _record_action(
        ticket=ticket,
        tool=tool,
        idempotency_key=idempotency_key,
        item=item,
        amount_cents=amount_cents,
        at_turn=at_turn,
        reversible=reversible,
        args=args,
        repeat_of_earlier=repeat_of_earlier,
        reason=reason,
        status=status,
        by=by,
        refuse_in_flight=refuse_in_flight,
    )
    if isinstance(outcome, ActionRecorded):
        return outcome
    # Nothing was written for the refused request; the refusal is, then raised past the writing block.
    attempt = RefusedAttempt.objects.create(
        ticket=ticket,
        actor_kind=by.kind,
        actor=by.user,
        tool=tool,
        item=item,
        amount_cents=amount_cents,
        at_turn=at_turn,
        thread_turn=outcome.thread_turn,
        request=outcome.request,
        earlier_action_id=outcome.earlier.id,
        message=outcome.message,
    )
    raise RepeatRefused(
        outcome.message,
        earlier_action=outcome.earlier.model_dump(mode="json", exclude={"intended_at"}),
        refunded_cents_total=outcome.refunded_cents_total,
        refused_attempt_id=attempt.pk,
    )


@dataclass(frozen=True)
class _Refusal:
    """A repeat the guard refused, before anything was written."""

    earlier: ActionItem
    message: str
    request: dict[str, Any]
    thread_turn: int
    refunded_cents_total: int


def _locked_state(ticket_pk: int, idempotency_key: str) -> QuerySet[PinnedState]:
    prior = IdempotencyRecord.objects.filter(ticket=OuterRef("ticket_id"), key=idempotency_key)
    return (
        PinnedState.objects.select_for_update(of=("self", "ticket"))
        .select_related("ticket__ticket_class")
        # The items as JSON text, parsed and validated by pydantic in one pass (a long state's largest cost
        # here); `data` itself is not read: the change is written as an edit of it.
        .defer("data")
        .annotate(
            data_text=Cast("data", TextField()),
            prior_fingerprint=Subquery(prior.values("fingerprint")[:1]),
            prior_body=Subquery(prior.values("response_body")[:1], output_field=JSONField()),
        )
        .filter(ticket_id=ticket_pk)[:2]
    )


# Compiled once per process: every action takes this lock.
LOCKED_STATE = CompiledRead(_locked_state, int, str)


def _lock_for_action(ticket: Ticket, idempotency_key: str) -> PinnedState:
    """The state and ticket rows locked, with the class and the first answer to this key (if any), in one
    query. Call with the key held (`hold_key`): a request with the same key cannot commit between this
    query's snapshot and its lock, so the answer read with it is decisive."""
    pinned = LOCKED_STATE.get(ticket.pk, idempotency_key, using=ticket._state.db or "default")
    tools = pinned.ticket.ticket_class.tool_catalog
    pinned.keep_items(StateItems.load_json(pinned.data_text, tools=tools))  # type: ignore[attr-defined]
    return pinned


@transaction.atomic
def _record_action(
    *,
    ticket: Ticket,
    tool: str,
    idempotency_key: str,
    item: str,
    amount_cents: int,
    at_turn: int | None,
    reversible: bool,
    args: dict[str, Any] | None,
    repeat_of_earlier: bool,
    reason: str,
    status: str | None,
    by: Actor,
    refuse_in_flight: bool,
) -> ActionRecorded | _Refusal:
    if not idempotency_key or len(idempotency_key) > 255:
        raise InvalidInput("an idempotency key of 1 to 255 characters is required", field="idempotency_key")
    if not tool:
        raise InvalidInput("tool must not be empty", field="tool")
    if amount_cents < 0:
        raise InvalidInput("amount_cents must not be negative", field="amount_cents")
    if repeat_of_earlier and not reason.strip():
        raise InvalidInput("a deliberate repeat needs a reason", field="reason")
    if status is not None and status not in RECORDABLE_STATUSES:
        raise InvalidInput(
            f"status {status!r}: record an action as intended (before its tool runs) or succeeded; "
            "a failed intent is settled with PATCH on the action",
            field="status",
        )
    action_status: ActionStatus = (
        ActionStatus.INTENDED if status == ActionStatus.INTENDED else ActionStatus.SUCCEEDED
    )
    request_body: dict[str, Any] = {
        "tool": tool,
        "item": item,
        "amount_cents": amount_cents,
        "at_turn": at_turn,
        "reversible": reversible,
        "args": args or {},
        "repeat_of_earlier": repeat_of_earlier,
        "reason": reason,
    }
    if action_status == ActionStatus.INTENDED:
        # Only then: the keys stored before intents existed keep their fingerprints.
        request_body["status"] = ActionStatus.INTENDED
    fingerprint = request_fingerprint(request_body)

    # Held first: the key's first answer is then read in the lock query's own snapshot, and a concurrent
    # retry either waits here (then reads that answer) or, for the API, is refused at once.
    hold_key(ticket, idempotency_key, wait=not refuse_in_flight)
    pinned = _lock_for_action(ticket, idempotency_key)
    locked_ticket = pinned.ticket
    if pinned.prior_fingerprint is not None:  # type: ignore[attr-defined]
        if pinned.prior_fingerprint != fingerprint:  # type: ignore[attr-defined]
            raise IdempotencyKeyReused(
                f"idempotency key {idempotency_key!r} was first used with a different request body",
                idempotency_key=idempotency_key,
            )
        return ActionRecorded(body=pinned.prior_body, replayed=True)  # type: ignore[attr-defined]

    turn = check_turn(locked_ticket, at_turn)
    items = pinned.items
    action = ActionItem(
        id="",
        tool=tool,
        item=item,
        amount_cents=amount_cents,
        at_turn=turn,
        reversible=reversible,
        args=args or {},
        idempotency_key=idempotency_key,
        recorded_by=by.kind,  # type: ignore[arg-type]
        reason=reason,
        status=action_status,
        intended_at=timezone.now() if action_status == ActionStatus.INTENDED else None,
    )
    # A listed irreversible tool stays irreversible whatever the agent said.
    action.reversible = not items.is_irreversible(action)
    earlier = None if action.reversible else items.earlier_irreversible(tool=tool, item=item)
    if earlier is not None and not repeat_of_earlier:
        return _Refusal(
            earlier=earlier,
            message=f"refused: {earlier.describe()} was already {_held_how(earlier)} ({earlier.id}); "
            f"a second irreversible {tool} for {item or 'this ticket'} needs "
            '"repeat_of_earlier": true and a reason',
            request=request_body,
            thread_turn=locked_ticket.turn_count,
            refunded_cents_total=items.refunded_cents_total,
        )
    action.repeat_of = earlier.id if earlier else None

    op = StateOp.ACTION_INTENDED if action_status == ActionStatus.INTENDED else StateOp.ACTION_TAKEN
    action, pinned = change_pinned_state(
        ticket=ticket,
        op=op,
        by=by,
        mutate=lambda state: state.add_action(action),
        at_turn=turn,
        reason=reason,
        locked=pinned,
    )
    body = _answer(action, pinned)
    IdempotencyRecord.objects.create(
        ticket=locked_ticket,
        key=idempotency_key,
        fingerprint=fingerprint,
        response_status=201,
        response_body=body,
    )
    return ActionRecorded(body=body, replayed=False)


def _held_how(action: ActionItem) -> str:
    return "reserved and not yet settled" if action.status == ActionStatus.INTENDED else "recorded"


@dataclass(frozen=True)
class ActionSettled:
    body: dict[str, Any]
    changed: bool


@transaction.atomic
def settle_action(
    *, ticket: Ticket, action_id: str, status: str, reason: str = "", by: Actor = SYSTEM
) -> ActionSettled:
    """Settle an intent once its tool has run: succeeded, or failed with a reason (which frees the item).

    Settling again with the same status answers the same; with the other status it is refused. An action
    recorded without an intent is already succeeded.
    """
    if status not in (ActionStatus.SUCCEEDED, ActionStatus.FAILED):
        raise InvalidInput(f"status {status!r}: settle an intent as succeeded or failed", field="status")
    reason = (reason or "").strip()
    if status == ActionStatus.FAILED and not reason:
        raise InvalidInput("a failed intent needs a reason (what the tool answered)", field="reason")
    pinned = PinnedState.objects.select_for_update().select_related("ticket__ticket_class").get(ticket=ticket)
    current = pinned.items.find_action(action_id)
    if current is None:
        raise ActionNotFound(f"no action {action_id!r} on {ticket.ticket_id}", action_id=action_id)
    if current.status == status:
        return ActionSettled(body=_answer(current, pinned), changed=False)
    if current.status != ActionStatus.INTENDED:
        raise ActionAlreadySettled(
            f"action {action_id} is already {current.status}; it cannot become {status}",
            action=current.model_dump(mode="json", exclude={"intended_at"}),
        )
    new_status: ActionStatus = (
        ActionStatus.SUCCEEDED if status == ActionStatus.SUCCEEDED else ActionStatus.FAILED
    )
    action, pinned = change_pinned_state(
        ticket=ticket,
        op=StateOp.ACTION_SETTLED,
        by=by,
        mutate=lambda items: items.settle_action(action_id=action_id, status=new_status, reason=reason),
        at_turn=current.at_turn,
        reason=reason,
    )
    return ActionSettled(body=_answer(action, pinned), changed=True)
