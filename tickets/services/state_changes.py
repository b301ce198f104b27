"""Changes to the pinned state: the agents' (constraints, questions, decisions) and the supervisors'
corrections. Each operation is one method of `StateItems`; this module locks, versions and audits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Expression, F
from django.utils import timezone

from core.errors import InvalidInput
from core.identity import action_keys
from core.state import (
    PROVENANCES,
    TEXT_ITEM_LISTS,
    ActionItem,
    ItemChange,
    Provenance,
    StateItems,
    TextItem,
    agent_item,
    items_to_data,
    state_document,
    stored_open_intent,
    validate_changes,
)
from core.state_text import action_texts, item_text, tail_text
from core.tokens import RequestSize, state_frame_tokens, state_item_tokens
from core.vocabulary import AGENT_STATE_OPS, CORRECTION_OPS, StateOp
from tickets import json_edits, served_state
from tickets.action_rows_sql import action_number
from tickets.errors import StaleVersion
from tickets.fingerprints import request_fingerprint
from tickets.models import (
    SERVED_COLUMNS,
    SERVED_TAIL,
    STORED_STATE_COLUMNS,
    PinnedState,
    StateAction,
    StateActionKey,
    StateChange,
    Ticket,
    stored_state_flags,
)
from tickets.services.actors import SYSTEM, Actor
from tickets.services.idempotency import StoredAnswer, answer_record, hold_key, scoped_key, stored_answer
from tickets.state_actions import keep_touched_items
from tickets.write_batch import WriteBatch


def lock_pinned_state(ticket: Ticket) -> PinnedState:
    """The ticket's pinned state with its ticket and class, the state's and the ticket's rows locked (not the
    class's: every ticket of a class would wait on it)."""
    return (
        PinnedState.objects.select_for_update(of=("self", "ticket"))
        .select_related("ticket__ticket_class")
        .defer(*STORED_STATE_COLUMNS)
        .annotate(**stored_state_flags())
        .get(ticket=ticket)
    )


def state_frame(pinned: PinnedState, totals: dict[str, int]) -> dict[str, Any]:
    """The agent-facing state with its item lists empty: what the frame of its token count is made of."""
    ticket = pinned.ticket
    return state_document(
        ticket=ticket.ticket_id,
        order=ticket.order_id,
        seller_type=ticket.seller_type,
        version=pinned.version,
        lists={},
        totals=totals,
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
    locked: PinnedState | None = None,
    batch: WriteBatch | None = None,
    touch: tuple[int, ...] | None = None,
) -> tuple[T, PinnedState]:
    """Lock the pinned state, check the version, apply `mutate`, bump the version, write the audit row.

    Call inside a transaction; `locked` is the state when the caller has locked it already
    (`lock_pinned_state`); `touch`, the numbers of the only actions `mutate` reads (the open intents are read
    too), when it needs not all of them. The state grows by deltas: its token count moves by the tokens of the items the
    operation changed (and of the frame: version, totals), the audit row keeps those items, not copies of the
    state, and the ticket's stored context size and `open_intent_since` move in one update. When `mutate`
    returns an item (an action, a constraint, ...), the audit row names it.

    The state row, the audit row and the ticket's figures are written together (`WriteBatch`: one statement
    on PostgreSQL). With `batch`, they are added to the caller's, which runs it with its own writes (an
    action's idempotency answer); without, they are sent before this returns.
    """
    if locked is None:
        locked = lock_pinned_state(ticket)
        if touch is not None:  # the change reads these actions (and the open intents), not the others
            keep_touched_items(locked, keys=[], numbers=touch)
    pinned = locked
    writes = batch if batch is not None else WriteBatch(pinned._state.db or "default")
    if expected_version is not None and expected_version != pinned.version:
        raise StaleVersion(
            f"the pinned state is at version {pinned.version}, not {expected_version}: "
            "someone changed it meanwhile; reload it and try again",
            current_version=pinned.version,
            current_state=pinned.agent_json(),
        )
    owner = pinned.ticket
    encoding = owner.ticket_class.encoding
    items = pinned.loaded_items()
    totals_before = items.totals()
    frame_before = state_frame_tokens(state_frame(pinned, totals_before), encoding)
    earlier = len(items.changes)  # items kept from an earlier change of this row carry its log
    positions = {name: [item.id for item in getattr(items, name)] for name in TEXT_ITEM_LISTS}
    stored_lists = set(items.model_fields_set)  # the lists the stored document has (validated from it)
    questions_opened = items.questions_opened
    result = mutate(items)
    # What the operation left, item by item (fields edited in place are not checked by pydantic on assignment).
    validate_changes(items.changes[earlier:])
    pinned.version += 1
    totals_after = items.totals()
    item_changes = items.changes[earlier:]
    delta = state_frame_tokens(state_frame(pinned, totals_after), encoding) - frame_before
    for change in item_changes:
        for side, sign in ((change.after, 1), (change.before, -1)):
            if side is not None:
                delta += sign * state_item_tokens(
                    change.category, agent_item(change.category, side), encoding
                )
    pinned.tokens += delta
    action_changes = [c for c in item_changes if c.category == "actions_taken"]
    text_changes = [c for c in item_changes if c.category != "actions_taken"]
    for change in action_changes:  # an action is its own row: recording one writes that row, not the state
        _write_action_row(writes, pinned, change)
    counts: dict[str, Any] = {}
    if action_changes:
        counts = {"action_count": items.action_count, "action_figures": items.figures.as_json()}
        pinned.action_count, pinned.action_figures = counts["action_count"], counts["action_figures"]
    edits = _data_edits(text_changes, positions, stored_lists, questions_opened, items)
    if edits is not None and json_edits.supported(connection.vendor):
        # The database edits the stored items in place, and the served texts beside them (when the locked row
        # had them current: `texts_stored`): a change sends the items it changed, not the state.
        texts = _served_writes(pinned, text_changes, totals_after, items)
        if edits:
            texts["data"] = json_edits.EditJSON("data", edits)
        writes.update_row(
            PinnedState,
            pinned.pk,
            **texts,
            **counts,
            version=pinned.version,
            tokens=pinned.tokens,
            updated_at=timezone.now(),
        )
        if edits:
            pinned.__dict__.pop("data", None)  # deferred: read again from the row if anyone asks
        for name, value in texts.items():
            if isinstance(value, Expression):  # computed by the database: read again if anyone asks
                pinned.__dict__.pop(name, None)
            else:
                setattr(pinned, name, value)
    else:
        pinned.data = items_to_data(items)
        texts = _text_columns(pinned.version, items, totals_after)
        for name, value in texts.items():
            setattr(pinned, name, value)
        pinned.updated_at = timezone.now()
        writes.update(
            PinnedState.objects.filter(pk=pinned.pk),
            data=pinned.data,
            **texts,
            **counts,
            version=pinned.version,
            tokens=pinned.tokens,
            updated_at=pinned.updated_at,
        )
    pinned.texts_stored = True  # type: ignore[attr-defined]  # a later change on this copy edits them too
    pinned.keep_items(items)
    moved = {
        name: [totals_before[name], totals_after[name]]
        for name in totals_after
        if totals_before[name] != totals_after[name]
    }
    writes.insert(
        StateChange(
            ticket=owner,
            op=op,
            actor_kind=by.kind,
            actor=by.user,
            from_version=pinned.version - 1,
            to_version=pinned.version,
            change={"items": [c.as_json() for c in item_changes], **({"totals": moved} if moved else {})},
            after_tokens=pinned.tokens,
            at_turn=at_turn,
            thread_turn=owner.turn_count,
            subject_id=getattr(result, "id", "") or "",
            reason=reason,
        )
    )
    fields: dict[str, Any] = {}
    if delta:
        fields["context_tokens"] = F("context_tokens") + delta
        full = RequestSize(system=owner.system_prompt_tokens, state=pinned.tokens).fills_threshold(
            owner.ticket_class.threshold_tokens
        )
        if full != owner.state_over_threshold:
            fields["state_over_threshold"] = full
    open_since = items.open_intent_since()
    if open_since != owner.open_intent_since:
        stale_at = open_since + owner.ticket_class.intent_timeout if open_since else None
        fields.update(open_intent_since=open_since, intent_stale_at=stale_at)
    if fields:
        writes.update_row(Ticket, owner.pk, **fields)
    if batch is None:
        writes.run()
    # The locked row was read fresh; the caller's copy follows it.
    owner.context_tokens += delta
    owner.open_intent_since = open_since
    owner.intent_stale_at = fields.get("intent_stale_at", owner.intent_stale_at)
    owner.state_over_threshold = fields.get("state_over_threshold", owner.state_over_threshold)
    if ticket is not owner:
        ticket.context_tokens = owner.context_tokens
        ticket.open_intent_since = owner.open_intent_since
        ticket.intent_stale_at = owner.intent_stale_at
        ticket.state_over_threshold = owner.state_over_threshold
    return result, pinned


def _data_edits(
    changes: list[ItemChange],
    positions: dict[str, list[str]],
    stored_lists: set[str],
    questions_opened: int,
    items: StateItems,
) -> list[json_edits.JSONEdit] | None:
    """The stored document's edits for these item changes (positions: each list's ids before them), or None
    when a removal among several changes would move the indexes the others name, or an item goes to a list
    the stored document lacks (an old or hand-made one): then the whole document is written."""
    edits: list[json_edits.JSONEdit] = []
    for change in changes:
        if change.before is None:
            if change.category not in stored_lists:
                return None
            edits.append(json_edits.JSONEdit("append", change.category, value=change.after))
            continue
        index = positions[change.category].index(change.before["id"])
        if change.after is None:
            if len(changes) > 1:
                return None
            edits.append(json_edits.JSONEdit("remove", change.category, index=index))
        else:
            edits.append(json_edits.JSONEdit("replace", change.category, index=index, value=change.after))
    if items.questions_opened != questions_opened:
        edits.append(json_edits.JSONEdit("set", "questions_opened", value=items.questions_opened))
    return edits


def _write_action_row(writes: WriteBatch, pinned: PinnedState, change: ItemChange) -> None:
    """An action's row written with the change: inserted with its item keys when the action is new, else its
    stored item and served texts rewritten (found by the primary key its loader kept, else by its number)."""
    after = change.after
    assert after is not None  # actions are never removed
    number = int(after["id"][1:])
    served, served_model = action_texts(after)
    values = {
        "data": after,
        "served": served,
        "served_model": served_model,
        "open_intent": stored_open_intent(after),
    }
    if change.before is None:
        writes.insert(StateAction(state_id=pinned.pk, number=number, **values))
        for key in action_keys(after.get("item") or "", after.get("args")):
            writes.insert(StateActionKey(state_id=pinned.pk, number=number, key=key))
        return
    row = pinned.__dict__.get("_action_pks", {}).get(number)
    if row is None:
        writes.update(StateAction.objects.filter(state_id=pinned.pk, number=number), **values)
    else:
        writes.update_row(StateAction, row, **values)


def _text_columns(version: int, items: StateItems, totals: dict[str, int]) -> dict[str, Any]:
    """The state row's served texts written in full: the text lists' (the actions' are on their rows), the
    totals and the version."""
    values: dict[str, Any] = {"served_version": version, SERVED_TAIL: tail_text(totals)}
    for name, column in SERVED_COLUMNS.items():
        values[column] = ",".join(
            item_text(name, agent_item(name, item.model_dump(mode="json"))) for item in getattr(items, name)
        )
    return values


def _served_writes(
    pinned: PinnedState, changes: list[ItemChange], totals: dict[str, int], items: StateItems
) -> dict[str, Any]:
    """The state row's served texts' new values (tickets.served_state) for these changes to its text lists:
    when the locked row had them current (`texts_stored`), each list one change touched edited in place by the
    database, a list several changes touched written anew, the totals and the version; else all in full."""
    if not (getattr(pinned, "texts_stored", False) and served_state.supported(connection.vendor)):
        return _text_columns(pinned.version, items, totals)
    touched: dict[str, list[ItemChange]] = {}
    for change in changes:
        touched.setdefault(change.category, []).append(change)
    values: dict[str, Any] = {"served_version": pinned.version, SERVED_TAIL: tail_text(totals)}
    for name, touching in touched.items():
        column = SERVED_COLUMNS[name]
        if len(touching) > 1:
            values[column] = _text_columns(pinned.version, items, totals)[column]
            continue
        [change] = touching
        old, new = (
            None if side is None else item_text(name, agent_item(change.category, side))
            for side in (change.before, change.after)
        )
        values[column] = served_state.TextEdit(column, old=old, new=new)
    return values


CORRECTION: Provenance = "supervisor_correction"


def check_source(source: str | None) -> Provenance | None:
    """How the desk knows an item, checked: one of PROVENANCES, or None when not said."""
    if source is None or source == "":
        return None
    for known in PROVENANCES:
        if source == known:
            return known
    raise InvalidInput(f"source {source!r}: say one of {', '.join(PROVENANCES)}", field="source")


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


def _apply(
    items: StateItems, *, op: str, text: str, at_turn: int | None, source: Provenance | None = None
) -> TextItem:
    """The text operations shared by agents and supervisors, by name."""
    if op == StateOp.CONSTRAINT_STATED:
        return items.state_constraint(text=_text(text), at_turn=at_turn, source=source)
    if op == StateOp.QUESTION_OPENED:
        return items.open_question(text=_text(text), at_turn=at_turn, source=source)
    if op == StateOp.QUESTION_RESOLVED:
        return items.resolve_question(question=_text(text))
    if op == StateOp.DECISION_MADE:
        return items.make_decision(text=_text(text), at_turn=at_turn, source=source)
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
    source: str | None = None,
    batch: WriteBatch | None = None,
) -> PinnedState:
    """An agent's state change other than an action: a constraint, a question opened or resolved, a decision.

    A resolved question is named by its id (`Q2`) or its exact text (case aside). `source` says how the agent
    knows it (a customer turn, its own inference, ...). With `batch`, its writes wait in it for the caller.
    """
    provenance = check_source(source)
    if op not in AGENT_STATE_OPS:
        raise InvalidInput(f"unknown op {op!r}: expected one of {', '.join(AGENT_STATE_OPS)}", field="op")
    turn = check_turn(ticket, at_turn)
    _, pinned = change_pinned_state(
        ticket=ticket,
        op=StateOp(op),
        by=by,
        mutate=lambda items: _apply(items, op=op, text=text, at_turn=turn, source=provenance),
        at_turn=turn,
        expected_version=expected_version,
        reason=reason,
        batch=batch,
        touch=(),  # a text item's change reads no action
    )
    return pinned


@dataclass(frozen=True)
class StateChanged:
    """The answer to an agent's state write made with an Idempotency-Key: the agent-facing state at the new
    version (or, for a retry, the first answer again: `replayed`)."""

    status: int
    body: dict[str, Any]
    replayed: bool = False


@transaction.atomic
def change_state_once(
    *,
    ticket: Ticket,
    idempotency_key: str,
    key_scope: str,
    op: str,
    text: str,
    at_turn: int | None = None,
    expected_version: int | None = None,
    by: Actor = SYSTEM,
    source: str | None = None,
    refuse_in_flight: bool = False,
) -> StateChanged:
    """`change_state` with the semantics of the actions' Idempotency-Key: a retry with the same key and body
    gets the first answer again (before the version check: the retry of a change that was made carries the
    version it was made on); the same key with another body is refused (IdempotencyKeyReused); a key still
    in flight waits, or with `refuse_in_flight` (the API) is refused at once. Keys are per ticket and
    `key_scope` (the token). Only a change made is stored: a refused one is refused again the same way."""
    stored = scoped_key("state", key_scope, idempotency_key)
    fingerprint = request_fingerprint({"op": op, "text": text, "at_turn": at_turn, "source": source})
    hold_key(ticket, stored, wait=not refuse_in_flight)
    first = stored_answer(ticket, stored, fingerprint, shown_key=idempotency_key)
    if first is not None:
        return StateChanged(status=first.status, body=first.body, replayed=True)
    writes = WriteBatch(ticket._state.db or "default")
    pinned = change_state(
        ticket=ticket,
        op=op,
        text=text,
        at_turn=at_turn,
        expected_version=expected_version,
        by=by,
        source=source,
        batch=writes,
    )
    answer = StoredAnswer(status=200, body=pinned.agent_json())
    writes.insert(answer_record(ticket, stored, fingerprint, answer))  # with the change, in one statement
    writes.run()
    return StateChanged(status=answer.status, body=answer.body)


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
    external_ref: str | None = None,
) -> PinnedState:
    """A supervisor's correction of the pinned state. A reason is required; actions are never removed,
    only added (a missed one) or marked reversed. A missed action may carry the payment system's reference
    (`external_ref`: the ledger entry it was added from)."""
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
                    external_ref=external_ref or None,
                    source=CORRECTION,
                )
            )
        if op == StateOp.ACTION_REVERSED:
            return items.reverse_action(action_id=target_id, reason=reason)
        if op == StateOp.CONSTRAINT_EDITED:
            return items.edit_constraint(constraint_id=target_id, text=_text(text), source=CORRECTION)
        if op == StateOp.QUESTION_RESOLVED:
            return items.resolve_question(question=target_id or _text(text))
        return _apply(items, op=op, text=text, at_turn=turn, source=CORRECTION)

    _, pinned = change_pinned_state(
        ticket=ticket,
        op=StateOp(op),
        by=by,
        mutate=mutate,
        at_turn=turn,
        reason=reason,
        expected_version=expected_version,
        touch=() if (number := action_number(target_id)) is None else (number,),
    )
    return pinned
