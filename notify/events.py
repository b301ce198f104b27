"""The hooks: where an event happens, one call here records it for every channel of the ticket's class that
subscribes to its kind, after the caller's transaction commits, and queues its delivery.

Recording is idempotent: a notification is unique per (channel, kind, source object) in the database, so a
hook that fires twice, or two workers racing on the same event, record (and send) it once. A rolled-back
transaction records nothing. A failure here is logged and never breaks the caller (robust on_commit).

This module does not import the tickets or compaction apps (they import it): it reads the objects it is given.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.notifications import NotifyEvent, headline, truncate
from notify.models import Channel, Notification
from notify.tasks import schedule

logger = logging.getLogger(__name__)

# CompactionStatus values, spelled as core.vocabulary spells them.
_COMPACTION_KINDS = {
    "forced": NotifyEvent.FORCED_COMPACTION,
    "over_budget": NotifyEvent.OVER_BUDGET_COMPACTION,
    "failed": NotifyEvent.FAILED_COMPACTION,
}


def ticket_link(ticket_id: str, suffix: str = "") -> str:
    base = settings.SUNDRY_NOTIFY_SITE_URL.rstrip("/")
    return f"{base}/tickets/{quote(ticket_id, safe='')}/{suffix}"


def record(
    *,
    ticket_class_id: int,
    kind: str,
    source_id: str,
    ticket_ref: str,
    detail: str,
    event: dict[str, Any],
    occurred_at: datetime | None = None,
) -> list[Notification]:
    """Record the event for each subscribed channel (once: a duplicate is a no-op) and queue the new ones.

    Call it outside a transaction, or through the record_* hooks (which wait for the commit)."""
    created: list[Notification] = []
    channels = Channel.objects.filter(ticket_class_id=ticket_class_id, enabled=True)
    text = headline(kind, ticket_ref, truncate(detail, 600))
    details = dict(event)
    url = details.pop("url", None) or ticket_link(ticket_ref)
    for channel in channels:
        if kind not in channel.events:
            continue
        event_id = uuid.uuid4()
        payload = {
            "id": str(event_id),
            "kind": kind,
            "ticket": ticket_ref,
            "source": source_id,
            "occurred_at": (occurred_at or timezone.now()).isoformat(),
            "url": url,
            **details,
        }
        try:
            with transaction.atomic():
                notification = Notification.objects.create(
                    event_id=event_id,
                    channel=channel,
                    kind=kind,
                    source_id=source_id,
                    ticket_ref=ticket_ref,
                    text=text,
                    event=payload,
                    next_attempt_at=timezone.now(),
                )
        except IntegrityError:
            continue  # recorded before (the hook fired twice, or another worker won the race)
        created.append(notification)
    for notification in created:
        schedule(notification)
    return created


def _after_commit(fn: Any) -> None:
    transaction.on_commit(fn, robust=True)


def record_compaction(event: Any) -> None:
    """A compaction finished (or was recorded over budget): forced, over budget, failed, or with coverage
    misses. Anything else (applied with full coverage, deferred, superseded) is not an event."""
    kinds: list[str] = []
    if event.status in _COMPACTION_KINDS:
        kinds.append(_COMPACTION_KINDS[event.status])
    if event.status in ("applied", "forced") and event.coverage_missing_count:
        kinds.append(NotifyEvent.COVERAGE_MISS)
    if not kinds:
        return
    ticket = event.ticket
    missing = (event.coverage or {}).get("missing", []) if isinstance(event.coverage, dict) else []
    details = {
        "compaction": {
            "number": event.number,
            "status": event.status,
            "at_turn": event.at_turn,
            "reason": event.reason,
            "tokens_before": event.tokens_before,
            "tokens_after": event.tokens_after,
            "token_budget": event.token_budget,
            "threshold_tokens": event.threshold_tokens,
            "coverage_missing": [
                {"category": m.get("category"), "id": m.get("id"), "label": m.get("label")} for m in missing
            ],
        },
        "url": ticket_link(ticket.ticket_id, f"compactions/{event.number}/"),
    }

    def detail(kind: str) -> str:
        if kind == NotifyEvent.COVERAGE_MISS:
            labels = "; ".join(str(m.get("label") or m.get("id")) for m in missing)
            return f"compaction {event.number}'s summary misses {event.coverage_missing_count} pinned item(s): {labels}"
        return f"compaction {event.number} at turn {event.at_turn}: {event.reason or event.status}"

    def run() -> None:
        for kind in kinds:
            record(
                ticket_class_id=ticket.ticket_class_id,
                kind=kind,
                source_id=f"compaction:{event.pk}",
                ticket_ref=ticket.ticket_id,
                detail=detail(kind),
                event=details,
            )

    _after_commit(run)


def record_refusal(attempt: Any) -> None:
    """The guard refused a repeat of an irreversible action (only repeats: caps and stale beliefs are not)."""
    if attempt.code != "repeat_refused":
        return
    ticket = attempt.ticket
    details = {
        "refused": {
            "id": attempt.pk,
            "tool": attempt.tool,
            "item": attempt.item,
            "amount_cents": attempt.amount_cents,
            "at_turn": attempt.at_turn,
            "earlier_action_id": attempt.earlier_action_id,
            "message": attempt.message,
        }
    }
    _after_commit(
        lambda: record(
            ticket_class_id=ticket.ticket_class_id,
            kind=NotifyEvent.REFUSED_REPEAT,
            source_id=f"refused:{attempt.pk}",
            ticket_ref=ticket.ticket_id,
            detail=attempt.message,
            event=details,
        )
    )


def intent_source_id(ticket: Any) -> str:
    """One event per stretch of open intents: the ticket and the time its oldest open intent was made."""
    return f"intent:{ticket.pk}@{ticket.open_intent_since.isoformat()}"


def record_intent_past_limit(ticket: Any, *, open_actions: list[dict[str, Any]]) -> list[Notification]:
    """A ticket's oldest open intent is past its class's limit. Called by the periodic check."""
    since = ticket.open_intent_since
    limit = ticket.ticket_class.intent_timeout_minutes
    described = ", ".join(f"{a['id']} {a['tool']} {a['item']}".strip() for a in open_actions) or "an intent"
    return record(
        ticket_class_id=ticket.ticket_class_id,
        kind=NotifyEvent.INTENT_PAST_LIMIT,
        source_id=intent_source_id(ticket),
        ticket_ref=ticket.ticket_id,
        detail=f"{described} open since {since.isoformat(timespec='seconds')}, past the class's {limit}-minute limit",
        event={
            "intent": {
                "open_since": since.isoformat(),
                "stale_at": ticket.intent_stale_at.isoformat() if ticket.intent_stale_at else None,
                "limit_minutes": limit,
                "actions": open_actions,
            }
        },
    )
