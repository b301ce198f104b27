"""A ticket's history: every change, newest first, one page at a time, with who and when.

The entries come from five tables (turns, state changes, refused attempts, status changes, compactions).
One UNION query orders and pages their (kind, time, id) triples; one query per kind on the page then reads
the rows. A page costs the same number of queries however long the ticket is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import CharField, F, QuerySet, Value

from compaction.models import CompactionEvent
from core.state import agent_item
from core.vocabulary import ActorKind, StateOp, values
from tickets.models import PinnedState, RefusedAttempt, StateChange, Ticket, TicketStatusChange, Turn

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200

# The source tables, by the tag the UNION carries.
TURN, STATE, REFUSED, STATUS, COMPACTION = "turn", "state", "refused", "status", "compaction"

ACTION_EVENTS = {
    StateOp.ACTION_TAKEN: "recorded",
    StateOp.ACTION_INTENDED: "intended",
    StateOp.ACTION_SETTLED: "settled",
    StateOp.ACTION_REVERSED: "reversed",
    StateOp.ACTION_ADDED: "added",
}


@dataclass(frozen=True)
class HistoryPage:
    entries: list[dict[str, Any]]
    count: int
    page: int
    page_size: int

    @property
    def has_next(self) -> bool:
        return self.page * self.page_size < self.count


def _tagged(queryset: QuerySet[Any], tag: str) -> QuerySet[Any]:
    # Every column is an annotation, so the UNION's columns line up in the order named.
    return queryset.annotate(
        src=Value(tag, output_field=CharField()), at=F("created_at"), ref=F("pk")
    ).values_list("src", "at", "ref")


def _stream(ticket: Ticket) -> QuerySet[Any]:
    turns = _tagged(Turn.objects.filter(ticket=ticket).order_by(), TURN)
    return turns.union(
        _tagged(StateChange.objects.filter(ticket=ticket).order_by(), STATE),
        _tagged(RefusedAttempt.objects.filter(ticket=ticket).order_by(), REFUSED),
        _tagged(TicketStatusChange.objects.filter(ticket=ticket).order_by(), STATUS),
        _tagged(CompactionEvent.objects.filter(ticket=ticket).order_by(), COMPACTION),
        all=True,
    )


def _who(kind: str, user: Any) -> dict[str, Any]:
    return {"kind": str(kind), "username": user.username if user is not None else None}


def _turn(turn: Turn) -> dict[str, Any]:
    what = turn.role + (f" {turn.tool}" if turn.tool else "")
    return {
        "kind": "turn",
        "at": turn.created_at,
        "by": _who(ActorKind.AGENT if turn.posted_by else ActorKind.SYSTEM, turn.posted_by),
        "thread_turn": turn.number,
        "summary": f"turn {turn.number} posted ({what})"
        + (f", completes {turn.boundary}" if turn.boundary else ""),
        "detail": {
            "number": turn.number,
            "role": turn.role,
            "tool": turn.tool,
            "tool_call_id": turn.tool_call_id,
            "boundary": turn.boundary,
            "tokens": turn.tokens,
        },
    }


def _action_in(state: dict[str, Any], action_id: str) -> dict[str, Any] | None:
    actions = state.get("actions_taken") or []
    return next((a for a in actions if a.get("id") == action_id), None)


def _changed_action(change: StateChange) -> dict[str, Any] | None:
    """The action a change recorded, reserved, settled or reversed, as the agent-facing state shows it."""
    for item in change.item_changes:
        if item.category == "actions_taken" and item.after is not None:
            return agent_item(item.category, item.after)
    return None


def _state_change(change: StateChange) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "op": change.op,
        "from_version": change.from_version,
        "to_version": change.to_version,
        "at_turn": change.at_turn,
        "subject_id": change.subject_id or None,
        "reason": change.reason,
    }
    label = StateOp(change.op).label if change.op in values(StateOp) else change.op
    if change.op in ACTION_EVENTS:
        kind = "action"
        action = _changed_action(change)
        detail["event"] = ACTION_EVENTS[StateOp(change.op)]
        detail["action"] = action
        if action:
            label = f"{label}: {action.get('tool')}" + (
                f" for {action['item']}" if action.get("item") else ""
            )
            if action.get("amount_cents"):
                label += f", {action['amount_cents']} cents"
            if change.op == StateOp.ACTION_SETTLED:
                label += f" -> {action.get('status')}"
    elif change.actor_kind == ActorKind.SUPERVISOR:
        kind = "correction"
    else:
        kind = "state_change"
    return {
        "kind": kind,
        "at": change.created_at,
        "by": _who(change.actor_kind, change.actor),
        "thread_turn": change.thread_turn,
        "summary": f"{label} (v{change.from_version} -> v{change.to_version})",
        "detail": detail,
    }


def _refused(attempt: RefusedAttempt, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "refused_attempt",
        "at": attempt.created_at,
        "by": _who(attempt.actor_kind, attempt.actor),
        "thread_turn": attempt.thread_turn,
        "summary": f"refused {attempt.tool}"
        + (f" for {attempt.item}" if attempt.item else "")
        + (f", {attempt.amount_cents} cents" if attempt.amount_cents else "")
        + f": held by {attempt.earlier_action_id}",
        "detail": {
            "tool": attempt.tool,
            "item": attempt.item,
            "amount_cents": attempt.amount_cents,
            "at_turn": attempt.at_turn,
            "request": attempt.request,
            "earlier_action_id": attempt.earlier_action_id,
            "earlier_action": _action_in(state, attempt.earlier_action_id),
            "message": attempt.message,
        },
    }


def _status(change: TicketStatusChange) -> dict[str, Any]:
    return {
        "kind": "status_change",
        "at": change.created_at,
        "by": _who(change.actor_kind, change.actor),
        "thread_turn": None,
        "summary": f"status {change.from_status} -> {change.to_status}",
        "detail": {"from": change.from_status, "to": change.to_status, "reason": change.reason},
    }


def _compaction(event: CompactionEvent) -> dict[str, Any]:
    replaced = (
        [event.first_replaced_turn, event.last_replaced_turn]
        if event.first_replaced_turn is not None and event.last_replaced_turn is not None
        else None
    )
    return {
        "kind": "compaction",
        "at": event.created_at,
        "by": _who(ActorKind.SYSTEM, None),
        "thread_turn": event.at_turn,
        "summary": f"compaction {event.number} {event.status} at turn {event.at_turn}"
        + (f", replaced turns {replaced[0]}-{replaced[1]}" if replaced else ""),
        "detail": {
            "number": event.number,
            "status": event.status,
            "reason": event.reason,
            "replaced_turns": replaced,
            "tokens_before": event.tokens_before,
            "tokens_after": event.tokens_after,
            "coverage_missing_count": event.coverage_missing_count,
            "summarizer_backend": event.summarizer_backend,
            "summarizer_model": event.summarizer_model,
        },
    }


def ticket_history(ticket: Ticket, *, page: int = 1, page_size: int = DEFAULT_PAGE_SIZE) -> HistoryPage:
    """One page of the ticket's history, newest first: at most eight queries, whatever its length."""
    page = max(page, 1)
    page_size = min(max(page_size, 1), MAX_PAGE_SIZE)
    stream = _stream(ticket)
    count = stream.count()
    start = (page - 1) * page_size
    rows = list(stream.order_by("-at", "-src", "-ref")[start : start + page_size])
    wanted: dict[str, list[int]] = {}
    for src, _, ref in rows:
        wanted.setdefault(src, []).append(ref)

    turns = Turn.objects.select_related("posted_by").in_bulk(wanted.get(TURN, [])) if TURN in wanted else {}
    changes = StateChange.objects.select_related("actor").in_bulk(wanted[STATE]) if STATE in wanted else {}
    refused = (
        RefusedAttempt.objects.select_related("actor").in_bulk(wanted[REFUSED]) if REFUSED in wanted else {}
    )
    statuses = (
        TicketStatusChange.objects.select_related("actor").in_bulk(wanted[STATUS]) if STATUS in wanted else {}
    )
    events = (
        CompactionEvent.objects.defer("summary").in_bulk(wanted[COMPACTION]) if COMPACTION in wanted else {}
    )
    # Refused attempts name the earlier action; its current form (settled? reversed?) is in the state.
    state = (
        PinnedState.objects.filter(ticket=ticket).values_list("data", flat=True).first() or {}
        if REFUSED in wanted
        else {}
    )

    entries: list[dict[str, Any]] = []
    for src, _, ref in rows:
        if src == TURN:
            entries.append(_turn(turns[ref]))
        elif src == STATE:
            entries.append(_state_change(changes[ref]))
        elif src == REFUSED:
            entries.append(_refused(refused[ref], state))
        elif src == STATUS:
            entries.append(_status(statuses[ref]))
        else:
            entries.append(_compaction(events[ref]))
    return HistoryPage(entries=entries, count=count, page=page, page_size=page_size)
