"""A ticket's history: every change, newest first, one page at a time, with who and when.

The entries come from nine tables (turns, state changes, refused attempts, status changes, compactions,
supervisors' reviews of compactions, handoffs, and the ledger's mismatches and resolutions).
One UNION query orders and pages their (kind, time, id) triples; one query per kind on the page then reads
the rows. A page costs the same number of queries however long the ticket is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import CharField, F, QuerySet, Value

from compaction.models import CompactionEvent, CompactionReview
from core.state import agent_item
from core.vocabulary import ActorKind, StateOp, values
from ledger.models import LedgerResolution, Outcome, Reconciliation
from tickets.action_rows_sql import action_number
from tickets.models import (
    Handoff,
    RefusedAttempt,
    StateAction,
    StateChange,
    Ticket,
    TicketStatusChange,
    Turn,
)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200

# The source tables, by the tag the UNION carries.
TURN, STATE, REFUSED, STATUS, COMPACTION = "turn", "state", "refused", "status", "compaction"
MISMATCH, RESOLUTION = "mismatch", "resolution"
HANDOFF = "handoff"
REVIEW = "review"

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
        _tagged(
            Reconciliation.objects.filter(ticket=ticket).exclude(outcome=Outcome.MATCHED).order_by(), MISMATCH
        ),
        _tagged(LedgerResolution.objects.filter(ticket=ticket).order_by(), RESOLUTION),
        _tagged(Handoff.objects.filter(ticket=ticket).order_by(), HANDOFF),
        _tagged(CompactionReview.objects.filter(event__ticket=ticket).order_by(), REVIEW),
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


def _earlier_actions(ticket: Ticket, attempts: list[RefusedAttempt]) -> dict[str, dict[str, Any]]:
    """The stored actions these refusals name (in their current form: settled? reversed?), by id; one query."""
    numbers = {n for a in attempts if (n := action_number(a.earlier_action_id)) is not None}
    if not numbers:
        return {}
    rows = StateAction.objects.filter(state__ticket=ticket, number__in=numbers).values_list("number", "data")
    return {f"A{number}": data for number, data in rows}


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


def _refused_why(attempt: RefusedAttempt) -> str:
    if attempt.code == "cap_exceeded":
        return ": past a cap of the class"
    if attempt.code == "belief_stale":
        return f": the agent's belief was stale ({attempt.earlier_action_id or 'no action'} behind it)"
    return f": held by {attempt.earlier_action_id}"


def _refused(attempt: RefusedAttempt, earlier: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "refused_attempt",
        "at": attempt.created_at,
        "by": _who(attempt.actor_kind, attempt.actor),
        "thread_turn": attempt.thread_turn,
        "summary": f"refused {attempt.tool}"
        + (f" for {attempt.item}" if attempt.item else "")
        + (f", {attempt.amount_cents} cents" if attempt.amount_cents else "")
        + _refused_why(attempt),
        "detail": {
            "code": attempt.code,
            "tool": attempt.tool,
            "item": attempt.item,
            "amount_cents": attempt.amount_cents,
            "at_turn": attempt.at_turn,
            "request": attempt.request,
            "earlier_action_id": attempt.earlier_action_id,
            "earlier_action": earlier.get(attempt.earlier_action_id),
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


def _review(review: CompactionReview) -> dict[str, Any]:
    event = review.event
    return {
        "kind": "review",
        "at": review.created_at,
        "by": _who(ActorKind.SUPERVISOR, review.by),
        "thread_turn": None,
        "summary": f"compaction {event.number} reviewed: {review.get_verdict_display().lower()}"
        + (f" ({review.comment})" if review.comment else ""),
        "detail": {
            "compaction": event.number,
            "compaction_status": event.status,
            "compaction_at_turn": event.at_turn,
            "verdict": review.verdict,
            "comment": review.comment,
        },
    }


def _mismatch(row: Reconciliation) -> dict[str, Any]:
    return {
        "kind": "ledger",
        "at": row.created_at,
        "by": _who(ActorKind.SYSTEM, None),
        "thread_turn": None,
        "summary": f"ledger: {Outcome(row.outcome).label.lower()}: {row.explanation}",
        "detail": {
            "event": "mismatch",
            "outcome": row.outcome,
            "entry_id": row.entry.entry_id if row.entry else None,
            "action_id": row.action_id or None,
            "entry_amount_cents": row.entry_amount_cents,
            "action_amount_cents": row.action_amount_cents,
            "accepted": row.accepted_at is not None,
            "accepted_reason": row.accepted_reason,
        },
    }


def _resolution(row: LedgerResolution) -> dict[str, Any]:
    return {
        "kind": "ledger",
        "at": row.created_at,
        "by": _who(ActorKind.SUPERVISOR, row.by),
        "thread_turn": None,
        "summary": f"ledger mismatch resolved: {row.get_resolution_display().lower()} ({row.explanation})",
        "detail": {
            "event": "resolution",
            "resolution": row.resolution,
            "outcome": row.outcome,
            "entry_id": row.entry_id or None,
            "action_id": row.action_id or None,
            "reason": row.reason,
        },
    }


def handoff_entry(handoff: Handoff) -> dict[str, Any]:
    return {
        "kind": "handoff",
        "at": handoff.created_at,
        "by": _who(handoff.actor_kind, handoff.actor),
        "thread_turn": handoff.at_turn,
        "summary": f"handoff {handoff.from_agent} -> {handoff.to_agent}"
        + (f" at turn {handoff.at_turn}" if handoff.at_turn else ""),
        "detail": {
            "from_agent": handoff.from_agent,
            "to_agent": handoff.to_agent,
            "given": handoff.given,
            "state_version": handoff.state_version,
        },
    }


def ticket_history(ticket: Ticket, *, page: int = 1, page_size: int = DEFAULT_PAGE_SIZE) -> HistoryPage:
    """One page of the ticket's history, newest first: at most twelve queries, whatever its length."""
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
    mismatches = (
        Reconciliation.objects.select_related("entry").in_bulk(wanted[MISMATCH]) if MISMATCH in wanted else {}
    )
    resolutions = (
        LedgerResolution.objects.select_related("by").in_bulk(wanted[RESOLUTION])
        if RESOLUTION in wanted
        else {}
    )
    handoffs = Handoff.objects.select_related("actor").in_bulk(wanted[HANDOFF]) if HANDOFF in wanted else {}
    reviews = (
        CompactionReview.objects.select_related("by", "event")
        .only(
            "verdict",
            "comment",
            "created_at",
            "by__username",
            "event__number",
            "event__status",
            "event__at_turn",
        )
        .in_bulk(wanted[REVIEW])
        if REVIEW in wanted
        else {}
    )
    # Refused attempts name the earlier action; its current form (settled? reversed?) is on its row.
    earlier = _earlier_actions(ticket, list(refused.values())) if REFUSED in wanted else {}

    entries: list[dict[str, Any]] = []
    for src, _, ref in rows:
        if src == TURN:
            entries.append(_turn(turns[ref]))
        elif src == STATE:
            entries.append(_state_change(changes[ref]))
        elif src == REFUSED:
            entries.append(_refused(refused[ref], earlier))
        elif src == STATUS:
            entries.append(_status(statuses[ref]))
        elif src == MISMATCH:
            entries.append(_mismatch(mismatches[ref]))
        elif src == RESOLUTION:
            entries.append(_resolution(resolutions[ref]))
        elif src == HANDOFF:
            entries.append(handoff_entry(handoffs[ref]))
        elif src == REVIEW:
            entries.append(_review(reviews[ref]))
        else:
            entries.append(_compaction(events[ref]))
    return HistoryPage(entries=entries, count=count, page=page, page_size=page_size)
