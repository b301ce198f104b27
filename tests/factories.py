"""Small builders shared by the tests."""

from __future__ import annotations

from typing import Any

from tickets.models import Ticket
from tickets.services import append_turn


def add_turns(ticket: Ticket, *turns: dict[str, Any]) -> None:
    for turn in turns:
        append_turn(ticket=ticket, **turn)


def chat(ticket: Ticket, count: int) -> None:
    """`count` short customer/agent exchanges (agent turns are reply_sent boundaries)."""
    for i in range(count):
        role = "customer" if i % 2 == 0 else "agent"
        append_turn(
            ticket=ticket,
            role=role,
            content=f"message {i}",
            boundary="reply_sent" if role == "agent" else "",
        )
