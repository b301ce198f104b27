"""Changes to the pinned state: the agents' (constraints, questions, decisions) and the supervisors'
corrections. Each operation is one method of `StateItems`; this module locks, versions and audits."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from tickets.errors import InvalidInput, StaleVersion
from tickets.models import PinnedState, StateChange, StateOp, Ticket
from tickets.services.actors import SYSTEM, Actor
from tickets.services.context_size import add_context_tokens
from tickets.state import ActionItem, StateItems, TextItem, items_to_data
from tickets.tokens import count_message, state_message

# The operations an agent may send to POST .../state/ (actions have their own endpoint).
AGENT_STATE_OPS = (
    StateOp.CONSTRAINT_STATED,
    StateOp.QUESTION_OPENED,
    StateOp.QUESTION_RESOLVED,
    StateOp.DECISION_MADE,
)
# What a supervisor may do: everything an agent may, plus add a missed action, mark one reversed,
# and edit a constraint's wording. Nothing is ever removed but a resolved question.
CORRECTION_OPS = (
    StateOp.ACTION_ADDED,
    StateOp.ACTION_REVERSED,
    StateOp.CONSTRAINT_STATED,
    StateOp.CONSTRAINT_EDITED,
    StateOp.QUESTION_OPENED,
    StateOp.QUESTION_RESOLVED,
    StateOp.DECISION_MADE,
)


def change_pinned_state[T](
    *,
    ticket: Ticket,
    op: StateOp,
    by: Actor,
    mutate: Callable[[StateItems], T],
    at_turn: int | None,
    reason: str = "",
    expected_version: int | None = None,
) -> tuple[T, PinnedState]:
    """Lock the pinned state, check the version, apply `mutate`, bump the version, write the audit row.

    Call inside a transaction. The ticket's stored context size moves by the change in the state's tokens,
    and its `open_intent_since` follows the intents still waiting to be settled. When `mutate` returns an
    item (an action, a constraint, ...), the audit row names it.
    """
    pinned = PinnedState.objects.select_for_update().select_related("ticket__ticket_class").get(ticket=ticket)
    if expected_version is not None and expected_version != pinned.version:
        raise StaleVersion(
            f"the pinned state is at version {pinned.version}, not {expected_version}: "
            "someone changed it meanwhile; reload it and try again",
            current_version=pinned.version,
            current_state=pinned.agent_json(),
        )
    before = pinned.agent_json()
    before_tokens = pinned.tokens
    items = pinned.items
    result = mutate(items)
    pinned.data = items_to_data(items)
    pinned.version += 1
    after = pinned.agent_json()
    pinned.tokens = count_message(state_message(after), pinned.ticket.ticket_class.encoding)
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
        subject_id=getattr(result, "id", "") or "",
        reason=reason,
    )
    open_since = items.open_intent_since()
    if open_since != pinned.ticket.open_intent_since:
        stale_at = open_since + pinned.ticket.ticket_class.intent_timeout if open_since else None
        Ticket.objects.filter(pk=pinned.ticket.pk).update(
            open_intent_since=open_since, intent_stale_at=stale_at
        )
        pinned.ticket.open_intent_since = ticket.open_intent_since = open_since
        pinned.ticket.intent_stale_at = ticket.intent_stale_at = stale_at
    add_context_tokens(ticket=pinned.ticket, delta=pinned.tokens - before_tokens)
    if ticket is not pinned.ticket:
        ticket.context_tokens = pinned.ticket.context_tokens
    return result, pinned


def check_turn(ticket: Ticket, at_turn: int | None) -> int | None:
    """The item's turn: the one named, or the newest; refused when the ticket has no such turn."""
    if at_turn is None:
        return ticket.turn_count or None
    if at_turn < 1 or at_turn > ticket.turn_count:
        raise InvalidInput(
            f"at_turn {at_turn} is not a turn of {ticket.ticket_id} (it has {ticket.turn_count})",
            field="at_turn",
        )
    return at_turn


def _text(text: str, field: str = "text") -> str:
    text = (text or "").strip()
    if not text:
        raise InvalidInput(f"{field} must not be empty", field=field)
    if len(text) > 2000:
        raise InvalidInput(f"{field} is longer than 2000 characters", field=field)
    return text


def _apply(items: StateItems, *, op: str, text: str, at_turn: int | None) -> TextItem:
    """The text operations shared by agents and supervisors, by name."""
    if op == StateOp.CONSTRAINT_STATED:
        return items.state_constraint(text=_text(text), at_turn=at_turn)
    if op == StateOp.QUESTION_OPENED:
        return items.open_question(text=_text(text), at_turn=at_turn)
    if op == StateOp.QUESTION_RESOLVED:
        return items.resolve_question(question=_text(text))
    if op == StateOp.DECISION_MADE:
        return items.make_decision(text=_text(text), at_turn=at_turn)
    raise InvalidInput(f"unknown op {op!r}", field="op")  # pragma: no cover - callers check the op first


@transaction.atomic
def change_state(
    *,
    ticket: Ticket,
    op: str,
    text: str,
    at_turn: int | None = None,
    expected_version: int | None = None,
    reason: str = "",
    by: Actor = SYSTEM,
) -> PinnedState:
    """An agent's state change other than an action: a constraint, a question opened or resolved, a decision.

    A resolved question is named by its id (`Q2`) or its exact text (case aside).
    """
    if op not in AGENT_STATE_OPS:
        raise InvalidInput(f"unknown op {op!r}: expected one of {', '.join(AGENT_STATE_OPS)}", field="op")
    turn = check_turn(ticket, at_turn)
    _, pinned = change_pinned_state(
        ticket=ticket,
        op=StateOp(op),
        by=by,
        mutate=lambda items: _apply(items, op=op, text=text, at_turn=turn),
        at_turn=turn,
        expected_version=expected_version,
        reason=reason,
    )
    return pinned


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
    turn = check_turn(ticket, at_turn) if at_turn is not None else None

    def mutate(items: StateItems) -> ActionItem | TextItem:
        if op == StateOp.ACTION_ADDED:
            if not tool.strip():
                raise InvalidInput("a missed action needs its tool", field="tool")
            if amount_cents < 0:
                raise InvalidInput("amount_cents must not be negative", field="amount_cents")
            return items.add_action(
                ActionItem(
                    id="",
                    tool=tool.strip(),
                    item=item.strip(),
                    amount_cents=amount_cents,
                    at_turn=turn,
                    reversible=reversible,
                    recorded_by="supervisor",
                    reason=reason,
                )
            )
        if op == StateOp.ACTION_REVERSED:
            return items.reverse_action(action_id=target_id, reason=reason)
        if op == StateOp.CONSTRAINT_EDITED:
            return items.edit_constraint(constraint_id=target_id, text=_text(text))
        if op == StateOp.QUESTION_RESOLVED:
            return items.resolve_question(question=target_id or _text(text))
        return _apply(items, op=op, text=text, at_turn=turn)

    _, pinned = change_pinned_state(
        ticket=ticket,
        op=StateOp(op),
        by=by,
        mutate=mutate,
        at_turn=turn,
        reason=reason,
        expected_version=expected_version,
    )
    return pinned
