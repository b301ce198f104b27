"""The ticket's stored context size (the queue sorts and filters on it), kept current in SQL.

Every writer adds the difference it makes (a turn its tokens, a state change the change in the state's
tokens) under its own lock, so nothing re-adds the whole request.
"""

from __future__ import annotations

from tickets.models import Ticket


def set_context_tokens(*, ticket: Ticket, total: int) -> None:
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=total)
    ticket.context_tokens = total
