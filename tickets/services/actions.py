"""Recording actions, with idempotency keys and the guard against a second irreversible action.

An agent reserves an irreversible action before its tool runs (`status="intended"`), so the guard can refuse
it while the money has not moved; it settles the intent afterwards (`settle_action`). A refused attempt is
kept as a `RefusedAttempt` although nothing else of the request is.

One module although over 400 lines: an intent passes its checks (idempotency, repeat, belief, caps) in
one locked transaction, in that order, and every refusal is kept the same way; settling shares the lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import BooleanField, Func, JSONField, OuterRef, QuerySet, Subquery, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from core.caps import CapBreach, cap_breach
from core.errors import DeskError, InvalidInput
from core.identity import WHOLE_ORDER_KEYS, action_keys, has_words, normalize_name
from core.state import MONEY_TOTALS, ActionFigures, ActionItem, StateItems, agent_item, total_name
from core.vocabulary import ActionStatus, ActorKind, StateOp
from notify import events as notify_events
from tickets import telemetry
from tickets.action_rows_sql import action_number
from tickets.compiled_reads import CompiledRead
from tickets.errors import (
    ActionAlreadySettled,
    ActionNotFound,
    BeliefStale,
    CapExceeded,
    IdempotencyKeyReused,
    NotIntentOwner,
    RepeatRefused,
    TicketNotFound,
)
from tickets.fingerprints import request_fingerprint
from tickets.models import (
    STORED_STATE_COLUMNS,
    IdempotencyRecord,
    PinnedState,
    RefusedAttempt,
    Ticket,
    stored_state_flags,
)
from tickets.services.actors import SYSTEM, Actor
from tickets.services.idempotency import advisory_key_sql, hold_order, key_in_flight
from tickets.services.refused_flag import ticket_refused_mark
from tickets.services.state_changes import change_pinned_state, check_source, check_turn
from tickets.state_actions import keep_touched_items
from tickets.write_batch import WriteBatch


@dataclass(frozen=True)
class ActionRecorded:
    body: dict[str, Any]
    replayed: bool

    @property
    def action(self) -> dict[str, Any]:
        return self.body["action"]


def _answer(action: ActionItem, pinned: PinnedState) -> dict[str, Any]:
    """What an action request is answered with: the action, the state version and the money totals."""
    totals = pinned.loaded_items().totals()  # from the actions' figures, not the actions
    return {
        "action": _public(action),
        "state_version": pinned.version,
        **{
            name: totals[name]
            for name in ("refunded_cents_total", "charged_cents_total", "credited_cents_total")
        },
    }


RECORDABLE_STATUSES = (ActionStatus.INTENDED, ActionStatus.SUCCEEDED)


def record_action(
    *,
    ticket: Ticket | str,
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
    expects: dict[str, Any] | None = None,
    source: str | None = None,
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

    Before any of that can reserve money: the agent's belief (`expects`: a money total, or
    `succeeded_count`, the succeeded actions of this tool) must be the desk's figure with no intent open
    that would move it (BeliefStale), and the class's caps must leave room for the amount (CapExceeded);
    both refusals are kept like a repeat's.

    `ticket` is the ticket, or its id (the API's): then the ticket is read with the locked state, in the same
    statement, and an unknown one is TicketNotFound.
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
        expects=expects,
        source=source,
    )
    ticket_id = ticket if isinstance(ticket, str) else ticket.ticket_id
    if isinstance(outcome, ActionRecorded):
        telemetry.guard_decision(
            ticket_id=ticket_id,
            tool=tool,
            item=item,
            amount_cents=amount_cents,
            decision="allowed",
            status=status,
            action_id=outcome.action.get("id", ""),
        )
        return outcome
    # Nothing was written for the refused request; the refusal is, then raised past the writing block.
    attempt = RefusedAttempt.objects.create(
        ticket=outcome.ticket,
        code=outcome.error.code,
        actor_kind=by.kind,
        actor=by.user,
        tool=tool,
        item=item,
        amount_cents=amount_cents,
        at_turn=at_turn,
        thread_turn=outcome.thread_turn,
        request=outcome.request,
        earlier_action_id=outcome.earlier_id,
        message=outcome.error.message,
    )
    ticket_refused_mark(ticket_id=outcome.ticket.pk)
    telemetry.guard_decision(
        ticket_id=ticket_id,
        tool=tool,
        item=item,
        amount_cents=amount_cents,
        decision="refused",
        status=status,
        earlier_action_id=outcome.earlier_id,
        message=outcome.error.message,
    )
    notify_events.record_refusal(attempt)
    outcome.error.detail["refused_attempt_id"] = attempt.pk
    raise outcome.error


@dataclass(frozen=True)
class _Refusal:
    """What the guard refused (a repeat, a stale belief, a cap), before anything was written."""

    error: DeskError
    earlier_id: str
    request: dict[str, Any]
    thread_turn: int
    ticket: Ticket  # as read with the locked state


def _public(action: ActionItem) -> dict[str, Any]:
    """The action as the agent-facing state shows it (no stored-only fields, no unsaid source)."""
    return agent_item("actions_taken", action.model_dump(mode="json"))


BELIEF_KEYS = (*MONEY_TOTALS, "succeeded_count")


def _check_expects(expects: dict[str, Any]) -> dict[str, int]:
    unknown = sorted(set(expects) - set(BELIEF_KEYS))
    if unknown:
        raise InvalidInput(
            f"expects: unknown figure {unknown[0]!r}; the desk checks {', '.join(BELIEF_KEYS)}",
            field="expects",
        )
    for name, value in expects.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"expects.{name} must be a whole number, 0 or more", field="expects")
    return dict(expects)


def _stale_belief(pinned: PinnedState, *, tool: str, expects: dict[str, int]) -> BeliefStale | None:
    """The first figure the agent believes that is not the desk's (or that an open intent may still move):
    checked against the actions' figures; only a stale belief reads the actions, to name those behind it."""
    items = pinned.loaded_items()
    tools = items.tools
    totals = items.totals()
    name = normalize_name(tool)
    for key, believed in expects.items():
        if key == "succeeded_count":
            actual, intended = items.figures.counts(tools, name=name)
        else:
            actual, intended = totals[key], items.figures.counts(tools, total=key)[1]
        if actual == believed and not intended:
            continue
        every = pinned.items.actions_taken  # all of them, read now
        if key == "succeeded_count":
            behind = [a for a in every if normalize_name(a.tool) == name and a.holds_item]
            what = f"succeeded {tool} actions"
        else:
            behind = [
                a
                for a in every
                if a.holds_item
                and (effect := tools.money_effect(a.tool)) is not None
                and total_name(effect) == key
            ]
            what = key
        pending = [a for a in behind if a.status == ActionStatus.INTENDED]
        named = "; ".join(f"{a.id} {a.describe()} ({a.status})" for a in behind) or "none"
        message = f"refused: you expect {what} to be {believed}, the desk has {actual}"
        if pending:
            message += f", and {len(pending)} intent(s) not yet settled may change it"
        message += f"; the actions behind it: {named}. Re-read the state before acting."
        return BeliefStale(
            message,
            figure=key,
            expected=believed,
            actual=actual,
            actions=[_public(a) for a in behind],
            **{name: totals[name] for name in MONEY_TOTALS},
        )
    return None


def _order_used_cents(ticket: Ticket, effect: str) -> int:
    """What the order's other tickets hold of this money effect (succeeded or reserved), from their actions'
    figures read with each one's class catalog."""
    others = (
        PinnedState.objects.select_related("ticket__ticket_class")
        .defer("data", *STORED_STATE_COLUMNS)
        .filter(ticket__order_id=ticket.order_id)
        .exclude(ticket_id=ticket.pk)
    )
    return sum(
        ActionFigures(other.action_figures).held_cents(other.ticket.ticket_class.tool_catalog, effect)
        for other in others
    )


def _cap_refusal(pinned: PinnedState, *, tool: str, amount_cents: int) -> CapBreach | None:
    locked_ticket = pinned.ticket
    caps = locked_ticket.ticket_class.caps
    items = pinned.loaded_items()
    effect = items.tools.money_effect(tool)
    if effect is None or caps.of(effect) is None:
        return None
    ticket_used = items.held_cents(effect)
    order_used = None
    if caps.has_order_caps(effect):
        # One money intent at a time per order, across its tickets: the others' figures are then decisive.
        hold_order(locked_ticket.order_id)
        order_used = ticket_used + _order_used_cents(locked_ticket, effect)
    return cap_breach(
        caps,
        effect=effect,
        amount_cents=amount_cents,
        ticket_used_cents=ticket_used,
        order_used_cents=order_used,
        order_paid_cents=locked_ticket.order_paid_cents,
    )


def _locked_state(ticket_id: str, idempotency_key: str) -> QuerySet[PinnedState]:
    prior = IdempotencyRecord.objects.filter(ticket=OuterRef("ticket_id"), key=idempotency_key)
    return (
        PinnedState.objects.select_for_update(of=("self", "ticket"))
        .select_related("ticket__ticket_class")
        # The items as JSON text, parsed and validated by pydantic in one pass (a long state's largest cost
        # here); `data` itself is not read: the change is written as an edit of it.
        .defer("data", *STORED_STATE_COLUMNS)
        .annotate(
            **stored_state_flags(),
            data_text=Cast("data", TextField()),
            prior_fingerprint=Subquery(prior.values("fingerprint")[:1]),
            prior_body=Subquery(prior.values("response_body")[:1], output_field=JSONField()),
        )
        # By the ticket's id: the API's action reads its ticket here, not in a query of its own before.
        .filter(ticket__ticket_id=ticket_id)
    )


# Compiled once per process: every action takes this lock.
LOCKED_STATE = CompiledRead(lambda ticket_id, key: _locked_state(ticket_id, key)[:2], str, str)


def _locked_state_holding_key(ticket_id: str, idempotency_key: str, *, wait: bool) -> QuerySet[PinnedState]:
    """PostgreSQL: `_locked_state` that takes the key's advisory lock in its own WHERE (waiting for it, or
    not: then no row comes back and nothing is locked), and reads the state's version in the statement's
    snapshot beside the locked row's (they differ when the row changed after the snapshot was taken). The
    lock's name is computed by the database from the ticket's primary key (`advisory_key_sql`)."""
    ticket_pk = Subquery(Ticket.objects.order_by().filter(ticket_id=ticket_id).values("pk")[:1])
    key = advisory_key_sql(ticket_pk, idempotency_key)
    if wait:  # pg_advisory_xact_lock returns void (as text: ''), once it has the lock
        lock = Func(key, template="(pg_advisory_xact_lock(%(expressions)s)::text = '')",
                    output_field=BooleanField())  # fmt: skip
    else:
        lock = Func(key, function="pg_try_advisory_xact_lock", output_field=BooleanField())
    seen = PinnedState.objects.filter(ticket_id=OuterRef("ticket_id")).values("version")[:1]
    return (
        _locked_state(ticket_id, idempotency_key)
        .alias(key_held=lock)
        .filter(key_held=True)
        .annotate(snapshot_version=Subquery(seen))[:2]
    )


# The same two ways (a duplicate still in flight waited for, or refused at once), compiled once each.
LOCKED_STATE_WAITING = CompiledRead(lambda t, k: _locked_state_holding_key(t, k, wait=True), str, str)
LOCKED_STATE_OR_NONE = CompiledRead(lambda t, k: _locked_state_holding_key(t, k, wait=False), str, str)


def _named(ticket: Ticket | str) -> tuple[str, str]:
    """The ticket's id and database alias, for a ticket or its id (the API's: the default database)."""
    if isinstance(ticket, str):
        return ticket, "default"
    return ticket.ticket_id, ticket._state.db or "default"


def _no_state(ticket: Ticket | str) -> Exception:
    """The error for a ticket with no state row: for one named by its id, it is unknown (TicketNotFound)."""
    if isinstance(ticket, str):
        return TicketNotFound(f"no ticket {ticket}", ticket_id=ticket)
    return PinnedState.DoesNotExist("PinnedState matching query does not exist.")


def _lock_for_action(ticket: Ticket | str, idempotency_key: str, *, wait: bool) -> PinnedState:
    """The state and ticket rows locked, with the class and the first answer to this key (if any), with the
    key held (`hold_key`'s lock): no request with the same key is then between its reads and its commit.

    Elsewhere than PostgreSQL the key needs no lock and this is one query. On PostgreSQL the key's lock is
    taken in the same statement: a same-key request that committed after that statement's snapshot and
    before the lock was taken changed the state row, which the lock then reads at its newest version; the
    snapshot's own version tells, and only then is the key's answer read again, in a snapshot of its own."""
    ticket_id, using = _named(ticket)
    if connections[using].vendor != "postgresql":
        try:
            return LOCKED_STATE.get(ticket_id, idempotency_key, using=using)
        except PinnedState.DoesNotExist:
            raise _no_state(ticket) from None
    read = LOCKED_STATE_WAITING if wait else LOCKED_STATE_OR_NONE
    rows = read.all(ticket_id, idempotency_key, using=using)
    if not rows:  # no such ticket or state, or the key held by another request
        if not PinnedState.objects.using(using).filter(ticket__ticket_id=ticket_id).exists():
            raise _no_state(ticket)
        raise key_in_flight(idempotency_key)
    [pinned] = rows
    if pinned.snapshot_version != pinned.version:  # type: ignore[attr-defined]
        prior = IdempotencyRecord.objects.using(using).filter(ticket_id=pinned.ticket_id, key=idempotency_key)
        first = prior.values_list("fingerprint", "response_body").first()
        pinned.prior_fingerprint, pinned.prior_body = first or (None, None)  # type: ignore[attr-defined]
    return pinned


@transaction.atomic
def _record_action(
    *,
    ticket: Ticket | str,
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
    expects: dict[str, Any] | None,
    source: str | None,
) -> ActionRecorded | _Refusal:
    if not idempotency_key or len(idempotency_key) > 255:
        raise InvalidInput("an idempotency key of 1 to 255 characters is required", field="idempotency_key")
    if not tool:
        raise InvalidInput("tool must not be empty", field="tool")
    if amount_cents < 0:
        raise InvalidInput("amount_cents must not be negative", field="amount_cents")
    if repeat_of_earlier and not reason.strip():
        raise InvalidInput("a deliberate repeat needs a reason", field="reason")
    belief = None if expects is None else _check_expects(expects)
    provenance = check_source(source)
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
    if belief is not None:
        request_body["expects"] = belief
    if provenance is not None:
        request_body["source"] = provenance
    fingerprint = request_fingerprint(request_body)

    # The key held with the rows locked: a concurrent retry either waits (then reads the first answer) or,
    # for the API, is refused at once.
    pinned = _lock_for_action(ticket, idempotency_key, wait=not refuse_in_flight)
    locked_ticket = pinned.ticket
    if pinned.prior_fingerprint is not None:  # type: ignore[attr-defined]
        if pinned.prior_fingerprint != fingerprint:  # type: ignore[attr-defined]
            raise IdempotencyKeyReused(
                f"idempotency key {idempotency_key!r} was first used with a different request body",
                idempotency_key=idempotency_key,
            )
        return ActionRecorded(body=pinned.prior_body, replayed=True)  # type: ignore[attr-defined]
    keys = action_keys(item, args)
    # A money action about no item collides with every earlier one of its kind: then all are read.
    keep_touched_items(pinned, keys=None if keys == WHOLE_ORDER_KEYS else keys)

    turn = check_turn(locked_ticket, at_turn)
    items = pinned.loaded_items()
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
        source=provenance,
    )
    # A listed irreversible tool stays irreversible whatever the agent said.
    action.reversible = not items.is_irreversible(action)
    tools = items.tools
    effect = tools.money_effect(tool)

    def refused(error: DeskError, earlier_id: str = "") -> _Refusal:
        return _Refusal(error, earlier_id, request_body, locked_ticket.turn_count, locked_ticket)

    needs_belief = effect is not None and action_status == ActionStatus.INTENDED and belief is None
    if needs_belief and locked_ticket.ticket_class.require_belief:
        raise InvalidInput(
            f"{tool} moves money ({effect}): this ticket's class needs the intent to say what you believe "
            'of the ticket\'s money, e.g. "expects": {"refunded_cents_total": 0}, from the state you read',
            field="expects",
        )
    earlier = None if action.reversible else items.earlier_irreversible(tool=tool, item=item, args=args)
    # A reason without a word in it (".", a zero-width space) does not make a repeat deliberate.
    deliberate = repeat_of_earlier and has_words(reason)
    if earlier is not None and not deliberate:
        message = _repeat_message(items, earlier, tool=tool, item=item, effect=effect)
        if repeat_of_earlier:
            message += f" (the reason {reason!r} has no words in it: say why a second one is right)"
        return refused(
            RepeatRefused(
                message,
                earlier_action=_public(earlier),
                refunded_cents_total=items.refunded_cents_total,
                **(
                    {"money_effect": effect, "tool_classified": not tools.is_unclassified_money(tool)}
                    if effect
                    else {}
                ),
            ),
            earlier.id,
        )
    action.repeat_of = earlier.id if earlier else None
    if belief is not None:
        stale = _stale_belief(pinned, tool=tool, expects=belief)
        if stale is not None:
            actions = stale.detail["actions"]
            return refused(stale, actions[0]["id"] if actions else "")
    breach = _cap_refusal(pinned, tool=tool, amount_cents=amount_cents)
    if breach is not None:
        return refused(CapExceeded(breach.message(), **breach.as_json()))
    if by.user is not None:
        action.recorded_by_user_id = by.user.pk

    op = StateOp.ACTION_INTENDED if action_status == ActionStatus.INTENDED else StateOp.ACTION_TAKEN
    # The state, the audit row, the ticket's figures and the key's answer: one statement on PostgreSQL.
    writes = WriteBatch(pinned._state.db or "default")
    action, pinned = change_pinned_state(
        ticket=locked_ticket if isinstance(ticket, str) else ticket,  # the caller's copy follows the row
        op=op,
        by=by,
        mutate=lambda state: state.add_action(action),
        at_turn=turn,
        reason=reason,
        locked=pinned,
        batch=writes,
    )
    body = _answer(action, pinned)
    writes.insert(
        IdempotencyRecord(
            ticket=locked_ticket,
            key=idempotency_key,
            fingerprint=fingerprint,
            response_status=201,
            response_body=body,
        )
    )
    writes.run()
    return ActionRecorded(body=body, replayed=False)


def _held_how(action: ActionItem) -> str:
    return "reserved and not yet settled" if action.status == ActionStatus.INTENDED else "recorded"


def _repeat_message(
    items: StateItems, earlier: ActionItem, *, tool: str, item: str, effect: str | None
) -> str:
    """Why the guard refused: what holds the item, and by which rule it is the same action."""
    message = f"refused: {earlier.describe()} was already {_held_how(earlier)} ({earlier.id})"
    if effect is not None:
        same = "the whole order" if not item and not earlier.item else item or "the whole order"
        kind = (
            "a charge to the buyer"
            if effect == "charge"
            else "a refund, a credit or another payment back to the buyer"
        )
        message += f"; {tool} is a {effect}, and {kind} for {same} is the same action whatever tool makes it"
        if not earlier.item or not item:
            message += " (an action with no item is about the whole order, so it collides with every item)"
        if items.tools.is_unclassified_money(tool):
            message += (
                f". {tool} is not in this class's catalog: its name says {effect}, so the desk treats it as "
                "money until an admin classifies it (the class's money tools)"
            )
    what = f"{tool} for {item or 'this ticket'}"
    return message + f'; a second irreversible {what} needs "repeat_of_earlier": true and a reason'


@dataclass(frozen=True)
class ActionSettled:
    body: dict[str, Any]
    changed: bool


def _state_only(ticket_id: str) -> QuerySet[PinnedState]:
    """The ticket's state row locked, and only it: the ticket's and the class's rows are read, not locked
    (every settle of a class would wait on a locked class row). Found by the ticket's id, so the API's settle
    reads its ticket here and not before; the items as JSON text, for pydantic to parse and validate in one
    pass (as the action's lock reads them)."""
    return (
        PinnedState.objects.select_for_update(of=("self",))
        .select_related("ticket__ticket_class")
        .defer("data", *STORED_STATE_COLUMNS)
        .annotate(**stored_state_flags(), data_text=Cast("data", TextField()))
        .filter(ticket__ticket_id=ticket_id)[:2]
    )


# Compiled once per process: every settle takes this lock.
STATE_ONLY_LOCKED = CompiledRead(lambda ticket_id: _state_only(ticket_id), str)


def _lock_state_only(ticket: Ticket | str, action_id: str) -> PinnedState:
    """The state row locked (and nothing else), with its ticket and class, its text items validated and of its
    actions the one named and the open intents. For a ticket named by its id, TicketNotFound when there is
    none."""
    ticket_id, using = _named(ticket)
    try:
        pinned = STATE_ONLY_LOCKED.get(ticket_id, using=using)
    except PinnedState.DoesNotExist:
        raise _no_state(ticket) from None
    number = action_number(action_id)
    keep_touched_items(pinned, keys=[], numbers=() if number is None else (number,))
    return pinned


def _may_settle(action: ActionItem, by: Actor) -> bool:
    """The agent that reserved the intent, or a supervisor; an intent kept from before owners were recorded
    (no owner) may be settled by anyone who may write."""
    if by.kind == ActorKind.SUPERVISOR or action.recorded_by_user_id is None:
        return True
    return by.user is not None and by.user.pk == action.recorded_by_user_id


@transaction.atomic
def settle_action(
    *,
    ticket: Ticket | str,
    action_id: str,
    status: str,
    reason: str = "",
    external_ref: str | None = None,
    by: Actor = SYSTEM,
) -> ActionSettled:
    """Settle an intent once its tool has run: succeeded, or failed with a reason (which frees the item).

    A succeeded settle may carry the payment system's reference (`external_ref`), which the ledger reconciler
    matches on. Settling again with the same status answers the same; with the other status it is refused. An
    action recorded without an intent is already succeeded. Only the agent that reserved the intent, or a
    supervisor, settles it (NotIntentOwner). The state row is locked once, and nothing else is.

    `ticket` is the ticket, or its id (the API's): then the ticket is read with the locked state, in the same
    statement, and an unknown one is TicketNotFound.
    """
    if status not in (ActionStatus.SUCCEEDED, ActionStatus.FAILED):
        raise InvalidInput(f"status {status!r}: settle an intent as succeeded or failed", field="status")
    reason = (reason or "").strip()
    if status == ActionStatus.FAILED and not reason:
        raise InvalidInput("a failed intent needs a reason (what the tool answered)", field="reason")
    pinned = _lock_state_only(ticket, action_id)
    owner = pinned.ticket if isinstance(ticket, str) else ticket
    current = pinned.loaded_items().find_action(action_id)
    if current is None:
        raise ActionNotFound(f"no action {action_id!r} on {owner.ticket_id}", action_id=action_id)
    if not _may_settle(current, by):
        raise NotIntentOwner(
            f"action {action_id} was reserved by another agent: only that agent, or a supervisor, settles it",
            action_id=action_id,
        )
    if current.status == status:
        return ActionSettled(body=_answer(current, pinned), changed=False)
    if current.status != ActionStatus.INTENDED:
        raise ActionAlreadySettled(
            f"action {action_id} is already {current.status}; it cannot become {status}",
            action=_public(current),
        )
    new_status: ActionStatus = (
        ActionStatus.SUCCEEDED if status == ActionStatus.SUCCEEDED else ActionStatus.FAILED
    )
    action, pinned = change_pinned_state(
        ticket=owner,
        op=StateOp.ACTION_SETTLED,
        by=by,
        mutate=lambda items: items.settle_action(
            action_id=action_id, status=new_status, reason=reason, external_ref=external_ref or None
        ),
        at_turn=current.at_turn,
        reason=reason,
        locked=pinned,
    )
    return ActionSettled(body=_answer(action, pinned), changed=True)
