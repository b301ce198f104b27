"""Recording actions, with idempotency keys and the guard against a second irreversible action."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from tickets.errors import IdempotencyKeyReused, InvalidInput, RepeatRefused
from tickets.models import IdempotencyRecord, PinnedState, StateOp, Ticket
from tickets.services.actors import SYSTEM, Actor
from tickets.services.state_changes import change_pinned_state, check_turn
from tickets.state import ActionItem, StateItems


def _fingerprint(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ActionRecorded:
    body: dict[str, Any]
    replayed: bool

    @property
    def action(self) -> dict[str, Any]:
        return self.body["action"]


@transaction.atomic
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
    by: Actor = SYSTEM,
) -> ActionRecorded:
    """Record an action the moment it succeeded.

    The same idempotency key with the same body returns the first result; with another body it is
    refused. A second irreversible action of the same tool on the same item is refused, naming the
    earlier one, unless the caller says it is a deliberate repeat and gives a reason.
    """
    if not idempotency_key or len(idempotency_key) > 255:
        raise InvalidInput("an idempotency key of 1 to 255 characters is required", field="idempotency_key")
    if not tool:
        raise InvalidInput("tool must not be empty", field="tool")
    if amount_cents < 0:
        raise InvalidInput("amount_cents must not be negative", field="amount_cents")
    if repeat_of_earlier and not reason.strip():
        raise InvalidInput("a deliberate repeat needs a reason", field="reason")
    request_body = {
        "tool": tool,
        "item": item,
        "amount_cents": amount_cents,
        "at_turn": at_turn,
        "reversible": reversible,
        "args": args or {},
        "repeat_of_earlier": repeat_of_earlier,
        "reason": reason,
    }
    fingerprint = _fingerprint(request_body)

    # The state row lock serializes every writer of this ticket, so the key lookup below is decisive.
    locked_ticket = Ticket.objects.select_for_update().get(pk=ticket.pk)
    PinnedState.objects.select_for_update().filter(ticket=ticket).exists()
    existing = IdempotencyRecord.objects.filter(ticket=ticket, key=idempotency_key).first()
    if existing is not None:
        if existing.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                f"idempotency key {idempotency_key!r} was first used with a different request body",
                idempotency_key=idempotency_key,
            )
        return ActionRecorded(body=existing.response_body, replayed=True)

    turn = check_turn(locked_ticket, at_turn)

    def mutate(items: StateItems) -> ActionItem:
        earlier = None if reversible else items.earlier_irreversible(tool=tool, item=item)
        if earlier is not None and not repeat_of_earlier:
            raise RepeatRefused(
                f"refused: {earlier.describe()} was already recorded ({earlier.id}); "
                f"a second irreversible {tool} for {item or 'this ticket'} needs "
                '"repeat_of_earlier": true and a reason',
                earlier_action=earlier.model_dump(mode="json"),
                refunded_cents_total=items.refunded_cents_total,
            )
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
            repeat_of=earlier.id if earlier else None,
            reason=reason,
        )
        return items.add_action(action)

    action, pinned = change_pinned_state(
        ticket=locked_ticket, op=StateOp.ACTION_TAKEN, by=by, mutate=mutate, at_turn=turn, reason=reason
    )
    body = {
        "action": action.model_dump(mode="json"),
        "state_version": pinned.version,
        "refunded_cents_total": pinned.items.refunded_cents_total,
    }
    IdempotencyRecord.objects.create(
        ticket=locked_ticket,
        key=idempotency_key,
        fingerprint=fingerprint,
        response_status=201,
        response_body=body,
    )
    return ActionRecorded(body=body, replayed=False)
