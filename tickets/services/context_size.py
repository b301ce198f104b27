"""The ticket's stored context size (the queue sorts and filters on it), set outright where a compaction
replaces turns. Every other writer moves it by the difference it makes under its own lock (a turn by its tokens
in `append_turn`, a state change by the change in the state's tokens in `change_pinned_state`), so nothing
re-adds the whole request."""

from __future__ import annotations

from tickets.models import Ticket


def set_context_tokens(*, ticket: Ticket, total: int) -> None:
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=total)
    ticket.context_tokens = total
