"""Every write to a ticket goes through one of these functions: atomic, locked, audited."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import IntegrityError, transaction

from compaction.context import count_turn, state_message
from compaction.tokens import count_message
from tickets.errors import (
    IdempotencyKeyReused,
    InvalidInput,
    RepeatRefused,
    StaleVersion,
    TicketAlreadyExists,
)
from tickets.models import (
    ActorKind,
    IdempotencyRecord,
    PinnedState,
    StateChange,
    StateOp,
    Ticket,
    TicketClass,
    TicketClassChange,
    TicketStatus,
    Turn,
    TurnRole,
)
from tickets.state import ActionItem, StateItems, TextItem, agent_state, items_to_data

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from compaction.services import PolicyOutcome

T = TypeVar("T")

AGENT_ROLES = {TurnRole.CUSTOMER, TurnRole.AGENT, TurnRole.TOOL_CALL, TurnRole.TOOL_RESULT}


@dataclass(frozen=True)
class Actor:
    """Who makes a change: an agent's service account, a supervisor, or the desk itself."""

    kind: ActorKind
    user: User | None = None

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.user.username}" if self.user else str(self.kind)


SYSTEM = Actor(kind=ActorKind.SYSTEM)


def _state_tokens(ticket: Ticket, state_json: dict[str, Any]) -> int:
    return count_message(state_message(state_json), ticket.ticket_class.encoding)


def refresh_context_tokens(*, ticket: Ticket) -> int:
    """Store the assembled-request size on the ticket (for the queue). Call inside the writing transaction."""
    from compaction.selectors import context_figures

    total = context_figures(ticket).total
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=total)
    ticket.context_tokens = total
    return total


@transaction.atomic
def open_ticket(
    *,
    ticket_id: str,
    order_id: str,
    seller_type: str,
    ticket_class: TicketClass,
    system_prompt: str | None = None,
    by: Actor = SYSTEM,
) -> Ticket:
    ticket_id = ticket_id.strip()
    if not ticket_id:
        raise InvalidInput("ticket_id must not be empty", field="ticket_id")
    if Ticket.objects.filter(ticket_id=ticket_id).exists():
        raise TicketAlreadyExists(f"ticket {ticket_id} already exists", ticket_id=ticket_id)
    prompt = system_prompt if system_prompt is not None else ticket_class.system_prompt
    try:
        with transaction.atomic():
            ticket = Ticket.objects.create(
                ticket_id=ticket_id,
                order_id=order_id,
                seller_type=seller_type,
                ticket_class=ticket_class,
                system_prompt=prompt,
                system_prompt_tokens=count_message(prompt, ticket_class.encoding),
            )
    except IntegrityError:
        raise TicketAlreadyExists(f"ticket {ticket_id} already exists", ticket_id=ticket_id) from None
    items = StateItems()
    state_json = agent_state(
        ticket=ticket.ticket_id, order=order_id, seller_type=seller_type, version=1, items=items
    )
    tokens = _state_tokens(ticket, state_json)
    PinnedState.objects.create(ticket=ticket, version=1, data=items_to_data(items), tokens=tokens)
    StateChange.objects.create(
        ticket=ticket,
        op=StateOp.OPENED,
        actor_kind=by.kind,
        actor=by.user,
        from_version=0,
        to_version=1,
        before={},
        after=state_json,
        after_tokens=tokens,
        thread_turn=0,
    )
    refresh_context_tokens(ticket=ticket)
    return ticket


@transaction.atomic
def set_ticket_status(*, ticket: Ticket, status: str, by: Actor = SYSTEM) -> Ticket:
    """Move a ticket between open, waiting, resolved and escalated. The thread and its state stay as they are."""
    if status not in TicketStatus.values:
        raise InvalidInput(
            f"status {status!r} is not one of {', '.join(TicketStatus.values)}", field="status"
        )
    locked = Ticket.objects.select_for_update().get(pk=ticket.pk)
    if locked.status != status:
        locked.status = status
        locked.save(update_fields=["status", "updated_at"])
    ticket.status = locked.status
    return locked


@dataclass(frozen=True)
class TurnAppended:
    turn: Turn
    context_tokens: int
    threshold_tokens: int
    compaction: PolicyOutcome | None


@transaction.atomic
def append_turn(
    *,
    ticket: Ticket,
    role: str,
    content: str = "",
    tool: str = "",
    args: dict[str, Any] | None = None,
    tool_call_id: str = "",
    boundary: str = "",
    extra: dict[str, Any] | None = None,
    run_policy: bool = True,
    by: Actor = SYSTEM,
) -> TurnAppended:
    """Store the next turn of the thread, then run the compaction policy on it.

    `run_policy=False` lets a caller apply the state changes that happen with the turn first (the
    importer does) and run the policy itself with `compaction.services.run_policy`.
    """
    if role not in AGENT_ROLES:
        raise InvalidInput(
            f"role {role!r} is not one of customer, agent, tool_call, tool_result", field="role"
        )
    if role == TurnRole.TOOL_CALL and not tool:
        raise InvalidInput("a tool_call turn needs its tool name", field="tool")
    if role != TurnRole.TOOL_CALL and not content:
        raise InvalidInput(f"a {role} turn needs content", field="content")
    if args is not None and not isinstance(args, dict):
        raise InvalidInput("args must be a JSON object", field="args")

    locked = Ticket.objects.select_for_update().select_related("ticket_class").get(pk=ticket.pk)
    number = locked.turn_count + 1
    tokens = count_turn(
        role=role,
        content=content,
        tool=tool,
        args=args,
        tool_call_id=tool_call_id,
        encoding=locked.ticket_class.encoding,
    )
    turn = Turn.objects.create(
        ticket=locked,
        number=number,
        role=role,
        content=content,
        tool=tool,
        args=args,
        tool_call_id=tool_call_id,
        boundary=boundary,
        tokens=tokens,
        extra=extra or {},
    )
    # The stored context size is kept current under this row lock, so a new turn adds exactly its own count.
    total = locked.context_tokens + tokens
    Ticket.objects.filter(pk=locked.pk).update(turn_count=number, context_tokens=total)
    locked.turn_count = ticket.turn_count = number
    locked.context_tokens = ticket.context_tokens = total

    outcome = None
    if run_policy:
        from compaction.services import run_policy as run_compaction_policy

        outcome = run_compaction_policy(ticket=locked, turn=turn)
        ticket.context_tokens = locked.context_tokens
    return TurnAppended(
        turn=turn,
        context_tokens=locked.context_tokens,
        threshold_tokens=locked.ticket_class.threshold_tokens,
        compaction=outcome,
    )


def _change_state[T](
    *,
    ticket: Ticket,
    op: StateOp,
    by: Actor,
    mutate: Callable[[StateItems], T],
    at_turn: int | None,
    reason: str = "",
    expected_version: int | None = None,
) -> tuple[T, PinnedState]:
    """Lock the pinned state, check the version, apply `mutate`, bump the version, write the audit row."""
    pinned = PinnedState.objects.select_for_update().select_related("ticket__ticket_class").get(ticket=ticket)
    if expected_version is not None and expected_version != pinned.version:
        raise StaleVersion(
            f"the pinned state is at version {pinned.version}, not {expected_version}: "
            "someone changed it meanwhile; reload it and try again",
            current_version=pinned.version,
            current_state=pinned.agent_json(),
        )
    before = pinned.agent_json()
    items = pinned.items
    result = mutate(items)
    pinned.data = items_to_data(items)
    pinned.version += 1
    after = pinned.agent_json()
    pinned.tokens = _state_tokens(pinned.ticket, after)
    pinned.save(update_fields=["data", "version", "tokens", "updated_at"])
    StateChange.objects.create(
        ticket=pinned.ticket,
        op=op,
        actor_kind=by.kind,
        actor=by.user,
        from_version=pinned.version - 1,
        to_version=pinned.version,
        before=before,
        after=after,
        after_tokens=pinned.tokens,
        at_turn=at_turn,
        thread_turn=pinned.ticket.turn_count,
        reason=reason,
    )
    refresh_context_tokens(ticket=pinned.ticket)
    return result, pinned


def _check_turn(ticket: Ticket, at_turn: int | None) -> int | None:
    if at_turn is None:
        return ticket.turn_count or None
    if at_turn < 1 or at_turn > ticket.turn_count:
        raise InvalidInput(
            f"at_turn {at_turn} is not a turn of {ticket.ticket_id} (it has {ticket.turn_count})",
            field="at_turn",
        )
    return at_turn


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

    turn = _check_turn(locked_ticket, at_turn)

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
            id=items.next_id("A", items.actions_taken),
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
        items.actions_taken.append(action)
        return action

    action, pinned = _change_state(
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


def _text(text: str, field: str = "text") -> str:
    text = (text or "").strip()
    if not text:
        raise InvalidInput(f"{field} must not be empty", field=field)
    if len(text) > 2000:
        raise InvalidInput(f"{field} is longer than 2000 characters", field=field)
    return text


@transaction.atomic
def state_constraint(
    *,
    ticket: Ticket,
    text: str,
    at_turn: int | None = None,
    expected_version: int | None = None,
    by: Actor = SYSTEM,
) -> PinnedState:
    """The customer stated a constraint ("no replacement wanted")."""
    text = _text(text)
    turn = _check_turn(ticket, at_turn)

    def mutate(items: StateItems) -> None:
        items.customer_constraints.append(
            TextItem(id=items.next_id("C", items.customer_constraints), text=text, at_turn=turn)
        )

    _, pinned = _change_state(
        ticket=ticket,
        op=StateOp.CONSTRAINT_STATED,
        by=by,
        mutate=mutate,
        at_turn=turn,
        expected_version=expected_version,
    )
    return pinned


@transaction.atomic
def open_question(
    *,
    ticket: Ticket,
    text: str,
    at_turn: int | None = None,
    expected_version: int | None = None,
    by: Actor = SYSTEM,
) -> PinnedState:
    text = _text(text)
    turn = _check_turn(ticket, at_turn)

    def mutate(items: StateItems) -> None:
        items.add_question(text=text, at_turn=turn)

    _, pinned = _change_state(
        ticket=ticket,
        op=StateOp.QUESTION_OPENED,
        by=by,
        mutate=mutate,
        at_turn=turn,
        expected_version=expected_version,
    )
    return pinned


@transaction.atomic
def resolve_question(
    *,
    ticket: Ticket,
    question: str,
    at_turn: int | None = None,
    expected_version: int | None = None,
    reason: str = "",
    by: Actor = SYSTEM,
) -> PinnedState:
    """Close an open question, named by its id (`Q2`) or its exact text (case aside)."""
    wanted = _text(question, field="text")
    turn = _check_turn(ticket, at_turn)

    def mutate(items: StateItems) -> None:
        for index, q in enumerate(items.open_questions):
            if q.id == wanted or q.text.casefold() == wanted.casefold():
                del items.open_questions[index]
                return
        open_ones = ", ".join(f"{q.id} {q.text!r}" for q in items.open_questions) or "none"
        raise InvalidInput(f"no open question {wanted!r}; open questions: {open_ones}", field="text")

    _, pinned = _change_state(
        ticket=ticket,
        op=StateOp.QUESTION_RESOLVED,
        by=by,
        mutate=mutate,
        at_turn=turn,
        expected_version=expected_version,
        reason=reason,
    )
    return pinned


@transaction.atomic
def record_decision(
    *,
    ticket: Ticket,
    text: str,
    at_turn: int | None = None,
    expected_version: int | None = None,
    by: Actor = SYSTEM,
) -> PinnedState:
    text = _text(text)
    turn = _check_turn(ticket, at_turn)

    def mutate(items: StateItems) -> None:
        items.decisions.append(TextItem(id=items.next_id("D", items.decisions), text=text, at_turn=turn))

    _, pinned = _change_state(
        ticket=ticket,
        op=StateOp.DECISION_MADE,
        by=by,
        mutate=mutate,
        at_turn=turn,
        expected_version=expected_version,
    )
    return pinned


AGENT_STATE_OPS = ("constraint_stated", "question_opened", "question_resolved", "decision_made")


def change_state(
    *,
    ticket: Ticket,
    op: str,
    text: str,
    at_turn: int | None = None,
    expected_version: int | None = None,
    by: Actor = SYSTEM,
) -> PinnedState:
    """One of an agent's state changes other than actions, by name (the API's and the importer's ops)."""
    if op == "constraint_stated":
        return state_constraint(
            ticket=ticket, text=text, at_turn=at_turn, expected_version=expected_version, by=by
        )
    if op == "question_opened":
        return open_question(
            ticket=ticket, text=text, at_turn=at_turn, expected_version=expected_version, by=by
        )
    if op == "question_resolved":
        return resolve_question(
            ticket=ticket, question=text, at_turn=at_turn, expected_version=expected_version, by=by
        )
    if op == "decision_made":
        return record_decision(
            ticket=ticket, text=text, at_turn=at_turn, expected_version=expected_version, by=by
        )
    raise InvalidInput(f"unknown op {op!r}: expected one of {', '.join(AGENT_STATE_OPS)}", field="op")


CORRECTION_OPS = {
    StateOp.ACTION_ADDED,
    StateOp.ACTION_REVERSED,
    StateOp.CONSTRAINT_STATED,
    StateOp.CONSTRAINT_EDITED,
    StateOp.QUESTION_OPENED,
    StateOp.QUESTION_RESOLVED,
    StateOp.DECISION_MADE,
}


@transaction.atomic
def correct_state(
    *,
    ticket: Ticket,
    by: Actor,
    reason: str,
    expected_version: int,
    op: str,
    target_id: str = "",
    text: str = "",
    tool: str = "",
    item: str = "",
    amount_cents: int = 0,
    at_turn: int | None = None,
    reversible: bool = False,
) -> PinnedState:
    """A supervisor's correction of the pinned state. A reason is required; actions are never removed,
    only added (a missed one) or marked reversed."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("a correction needs a reason", field="reason")
    if op not in CORRECTION_OPS:
        raise InvalidInput(f"unknown correction {op!r}", field="op")
    turn = _check_turn(ticket, at_turn) if at_turn is not None else None

    def mutate(items: StateItems) -> None:
        if op == StateOp.ACTION_ADDED:
            if not tool.strip():
                raise InvalidInput("a missed action needs its tool", field="tool")
            if amount_cents < 0:
                raise InvalidInput("amount_cents must not be negative", field="amount_cents")
            items.actions_taken.append(
                ActionItem(
                    id=items.next_id("A", items.actions_taken),
                    tool=tool.strip(),
                    item=item.strip(),
                    amount_cents=amount_cents,
                    at_turn=turn,
                    reversible=reversible,
                    recorded_by="supervisor",
                    reason=reason,
                )
            )
        elif op == StateOp.ACTION_REVERSED:
            action = items.find_action(target_id)
            if action is None:
                raise InvalidInput(f"no action {target_id!r} on this ticket", field="target_id")
            if action.reversed:
                raise InvalidInput(f"action {target_id} is already marked reversed", field="target_id")
            action.reversed = True
            action.reversed_reason = reason
        elif op == StateOp.CONSTRAINT_STATED:
            items.customer_constraints.append(
                TextItem(id=items.next_id("C", items.customer_constraints), text=_text(text), at_turn=turn)
            )
        elif op == StateOp.CONSTRAINT_EDITED:
            constraint = next((c for c in items.customer_constraints if c.id == target_id), None)
            if constraint is None:
                raise InvalidInput(f"no constraint {target_id!r} on this ticket", field="target_id")
            constraint.text = _text(text)
        elif op == StateOp.QUESTION_OPENED:
            items.add_question(text=_text(text), at_turn=turn)
        elif op == StateOp.QUESTION_RESOLVED:
            before = len(items.open_questions)
            items.open_questions[:] = [q for q in items.open_questions if q.id != target_id]
            if len(items.open_questions) == before:
                raise InvalidInput(f"no open question {target_id!r} on this ticket", field="target_id")
        elif op == StateOp.DECISION_MADE:
            items.decisions.append(
                TextItem(id=items.next_id("D", items.decisions), text=_text(text), at_turn=turn)
            )

    _, pinned = _change_state(
        ticket=ticket,
        op=StateOp(op),
        by=by,
        mutate=mutate,
        at_turn=turn,
        reason=reason,
        expected_version=expected_version,
    )
    return pinned


CLASS_AUDITED_FIELDS = (
    "slug",
    "token_budget",
    "compaction_threshold",
    "keep_recent_tokens",
    "summarizer_backend",
    "summarizer_model",
    "encoding",
    "system_prompt",
    "working_input_price",
    "working_output_price",
    "summarizer_input_price",
    "summarizer_output_price",
)


def _class_settings(ticket_class: TicketClass) -> dict[str, Any]:
    settings = {}
    for name in CLASS_AUDITED_FIELDS:
        value = getattr(ticket_class, name)
        settings[name] = value if isinstance(value, str | int | float) else str(value)
    return settings


@transaction.atomic
def save_ticket_class(*, ticket_class: TicketClass, by: User | None) -> TicketClass:
    """Create or change a ticket class, audited with its settings before and after.

    Stored token counts stay as they were computed (a turn is never tokenized again); a new budget or
    threshold applies from the next turn of each ticket.
    """
    from compaction.tokens import UnknownEncoding, get_encoding

    try:
        get_encoding(ticket_class.encoding)
    except UnknownEncoding as exc:
        raise InvalidInput(str(exc), field="encoding") from None
    before: dict[str, Any] = {}
    if ticket_class.pk is not None:
        before = _class_settings(TicketClass.objects.select_for_update().get(pk=ticket_class.pk))
    ticket_class.save()
    after = _class_settings(TicketClass.objects.get(pk=ticket_class.pk))  # as stored: 2 -> "2.0000"
    if before != after:
        TicketClassChange.objects.create(ticket_class=ticket_class, actor=by, before=before, after=after)
    return ticket_class
