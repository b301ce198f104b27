"""The periodic check for open intents past their class's limit (run by `deliver_notifications`)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.utils import timezone

from core.notifications import NotifyEvent
from notify.events import intent_source_id, record_intent_past_limit
from notify.models import Channel, Notification
from tickets.models import Ticket

BATCH = 200


def check_stale_intents(now: datetime | None = None) -> list[Notification]:
    """Record an `intent_past_limit` event for every ticket whose oldest open intent is past its limit and
    whose class has a channel for it; a ticket every such channel was told about is skipped with no write."""
    subscribed: dict[int, set[int]] = defaultdict(set)
    for channel in Channel.objects.filter(enabled=True).only("pk", "ticket_class_id", "events"):
        if isinstance(channel.events, list) and NotifyEvent.INTENT_PAST_LIMIT in channel.events:
            subscribed[channel.ticket_class_id].add(channel.pk)
    if not subscribed:
        return []
    stale = (
        Ticket.objects.filter(
            intent_stale_at__lte=now or timezone.now(),
            open_intent_since__isnull=False,
            ticket_class_id__in=list(subscribed),
        )
        .select_related("ticket_class")
        .order_by("intent_stale_at", "pk")
    )
    created: list[Notification] = []
    batch: list[Ticket] = []
    for ticket in stale.iterator(chunk_size=BATCH):
        batch.append(ticket)
        if len(batch) == BATCH:
            created += _record_batch(batch, subscribed)
            batch = []
    if batch:
        created += _record_batch(batch, subscribed)
    return created


def _record_batch(tickets: list[Ticket], subscribed: dict[int, set[int]]) -> list[Notification]:
    sources = {ticket.pk: intent_source_id(ticket) for ticket in tickets}
    told = set(
        Notification.objects.filter(
            kind=NotifyEvent.INTENT_PAST_LIMIT, source_id__in=list(sources.values())
        ).values_list("channel_id", "source_id")
    )
    created: list[Notification] = []
    for ticket in tickets:
        source = sources[ticket.pk]
        if all((channel, source) in told for channel in subscribed[ticket.ticket_class_id]):
            continue
        created += record_intent_past_limit(ticket, open_actions=_open_actions(ticket))
    return created


def _open_actions(ticket: Ticket) -> list[dict[str, Any]]:
    items = ticket.pinned_state.items
    return [
        {"id": a.id, "tool": a.tool, "item": a.item, "amount_cents": a.amount_cents}
        for a in items.actions_taken
        if a.is_open_intent
    ]
