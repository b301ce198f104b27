"""The periodic check for open intents past their class's limit (run by `deliver_notifications`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from notify.events import record_intent_past_limit
from notify.models import Notification
from tickets.models import Ticket


def check_stale_intents(now: datetime | None = None) -> list[Notification]:
    """Record an `intent_past_limit` event for every ticket whose oldest open intent is past its limit and
    whose class has a channel; an event already recorded is not recorded again."""
    tickets = (
        Ticket.objects.filter(
            intent_stale_at__lte=now or timezone.now(),
            open_intent_since__isnull=False,
            ticket_class__notification_channels__enabled=True,
        )
        .distinct()
        .select_related("ticket_class", "pinned_state")
        .order_by("intent_stale_at")
    )
    created: list[Notification] = []
    for ticket in tickets[:500]:
        created += record_intent_past_limit(ticket, open_actions=_open_actions(ticket))
    return created


def _open_actions(ticket: Ticket) -> list[dict[str, Any]]:
    items = ticket.pinned_state.items
    return [
        {"id": a.id, "tool": a.tool, "item": a.item, "amount_cents": a.amount_cents}
        for a in items.actions_taken
        if a.is_open_intent
    ]
