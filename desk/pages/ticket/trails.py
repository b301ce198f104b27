"""The ticket's trails: its state changes (as diffs of the state before and after), with the supervisors'
reviews of its compactions among them by time, and its status changes, newest first and windowed, and the
state panel a correction redraws.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Q, Subquery

from compaction.models import CompactionReview
from desk.pages.diff import DiffLine, change_diff
from desk.pages.ticket.actions import ActionList, action_list, inline_state_json
from tickets.models import PinnedState, StateChange, Ticket, TicketStatusChange

AUDIT_WINDOW = 20  # state changes
STATUS_WINDOW = 20  # status changes


@dataclass(frozen=True)
class AuditRow:
    """One state change with what it did, as a diff of the state before and after."""

    change: StateChange
    diff: list[DiffLine]


@dataclass(frozen=True)
class ReviewRow:
    """A supervisor's verdict on one of the ticket's compactions, in the audit trail beside the changes."""

    review: CompactionReview

    @property
    def at(self) -> datetime:
        return self.review.created_at


def audit_rows(changes: list[StateChange]) -> list[AuditRow]:
    return [AuditRow(change=c, diff=change_diff(c.change)) for c in changes]


def audit_reviews(
    ticket: Ticket, *, since: datetime | None = None, before_version: int | None = None
) -> list[CompactionReview]:
    """The reviews of the ticket's compactions that fall in the audit trail's window, newest first (one
    query): made at or after `since` (the oldest change shown, when older pages exist) and before the
    change at `before_version` (when the window is an older page). At most AUDIT_WINDOW of them."""
    reviews = (
        CompactionReview.objects.filter(event__ticket=ticket)
        .select_related("by", "event")
        .only("verdict", "comment", "created_at", "by__username", "event__number", "event__ticket_id")
        .order_by("-created_at", "-pk")
    )
    if since is not None:
        reviews = reviews.filter(created_at__gte=since)
    if before_version is not None:
        then = StateChange.objects.filter(ticket=ticket, to_version=before_version).values("created_at")[:1]
        reviews = reviews.filter(created_at__lt=Subquery(then))
    return list(reviews[:AUDIT_WINDOW])


def trail_rows(
    changes: list[StateChange], *, ticket: Ticket, has_older: bool, before_version: int | None
) -> list[AuditRow | ReviewRow]:
    """The audit trail's window (`changes`, newest first, at most AUDIT_WINDOW) with the reviews made in
    its span of time, merged newest first."""
    since = changes[-1].created_at if has_older and changes else None
    reviews = [ReviewRow(r) for r in audit_reviews(ticket, since=since, before_version=before_version)]
    rows: list[AuditRow | ReviewRow] = [*audit_rows(changes), *reviews]
    return sorted(rows, key=lambda r: r.at if isinstance(r, ReviewRow) else r.change.created_at, reverse=True)


def audit_trail(
    ticket: Ticket, *, limit: int | None = None, before_version: int | None = None
) -> list[StateChange]:
    """The ticket's state changes with their actor, newest first: all of them, or the newest `limit`
    made before `before_version` (a keyset on the version)."""
    changes = StateChange.objects.filter(ticket=ticket).select_related("actor").order_by("-to_version")
    if before_version is not None:
        changes = changes.filter(to_version__lt=before_version)
    return list(changes if limit is None else changes[:limit])


def status_trail(
    ticket: Ticket, *, limit: int | None = None, before: int | None = None
) -> list[TicketStatusChange]:
    """The ticket's status changes with their actor, newest first: all of them, or the newest `limit`
    older than the change with id `before` (a keyset on its time and id)."""
    changes = (
        TicketStatusChange.objects.filter(ticket=ticket)
        .select_related("actor")
        .order_by("-created_at", "-pk")
    )
    if before is not None:
        then = Subquery(
            TicketStatusChange.objects.filter(pk=before, ticket=OuterRef("ticket")).values("created_at")[:1]
        )
        changes = changes.filter(Q(created_at__lt=then) | Q(created_at=then, pk__lt=before))
    return list(changes if limit is None else changes[:limit])


@dataclass(frozen=True)
class StatePanel:
    """What a correction changes on the ticket page: the state panel and the header cards beside it."""

    ticket: Ticket
    state: dict[str, Any]
    audit: list[AuditRow | ReviewRow]
    audit_older_than: int | None = None
    # The actions the panel draws (a bounded part of the state's), and whether it inlines the state's JSON.
    actions: ActionList = field(default_factory=ActionList)
    state_json_inline: bool = True


def state_panel(ticket: Ticket) -> StatePanel:
    """The pinned state, the newest of the audit trail and the ticket's current figures, read after a
    correction."""
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket=ticket)
    changes = audit_trail(ticket, limit=AUDIT_WINDOW + 1)
    state = pinned.agent_json()
    return StatePanel(
        ticket=pinned.ticket,
        state=state,
        actions=action_list(state),
        state_json_inline=inline_state_json(state),
        audit=trail_rows(
            changes[:AUDIT_WINDOW], ticket=ticket, has_older=len(changes) > AUDIT_WINDOW, before_version=None
        ),
        audit_older_than=changes[AUDIT_WINDOW - 1].to_version if len(changes) > AUDIT_WINDOW else None,
    )


def changes_since(ticket: Ticket, version: int) -> list[StateChange]:
    """Changes made after `version`: what a stale editor did not see."""
    return list(
        StateChange.objects.filter(ticket=ticket, from_version__gte=version)
        .select_related("actor")
        .defer("change")
        .order_by("to_version")
    )
