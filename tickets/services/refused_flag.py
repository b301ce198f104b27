"""The queue row's stored refusal flag (Ticket.has_refused): refusals are append-only, so the flag turns on
with the first one kept and stays on."""

from __future__ import annotations

from tickets.models import Ticket


def ticket_refused_mark(*, ticket_id: int) -> None:
    """Flag the ticket as having a refused attempt (one UPDATE, none when already flagged)."""
    Ticket.objects.filter(pk=ticket_id, has_refused=False).update(has_refused=True)
