"""Handoffs between agents, recorded on the ticket beside its compactions."""

from __future__ import annotations

from typing import Any

from tickets.models import Handoff, PinnedState, Ticket
from tickets.services.actors import Actor


def record_handoff(
    *, ticket: Ticket, from_agent: str, to_agent: str, given: dict[str, Any], by: Actor
) -> Handoff:
    """Record that `from_agent` handed the ticket to `to_agent`, with what the receiving agent was given. The
    entry names the ticket's newest turn and the pinned state's version then: the state goes with the ticket
    whatever a handoff filter dropped from the conversation."""
    version = PinnedState.objects.filter(ticket=ticket).values_list("version", flat=True).first() or 1
    return Handoff.objects.create(
        ticket=ticket,
        actor_kind=by.kind,
        actor=by.user,
        from_agent=from_agent,
        to_agent=to_agent,
        given=given,
        at_turn=ticket.turn_count or None,
        state_version=version,
    )
