"""Small builders shared by the tests."""

from __future__ import annotations

import copy
from typing import Any

from desk.importer import ImportTicket, import_ticket
from desk.turns import receive_turn
from tickets.models import Ticket, TicketClass


def add_turns(ticket: Ticket, *turns: dict[str, Any]) -> None:
    for turn in turns:
        receive_turn(ticket=ticket, **turn)


def chat(ticket: Ticket, count: int) -> None:
    """`count` short customer/agent exchanges (agent turns are reply_sent boundaries)."""
    for i in range(count):
        role = "customer" if i % 2 == 0 else "agent"
        receive_turn(
            ticket=ticket,
            role=role,
            content=f"message {i}",
            boundary="reply_sent" if role == "agent" else "",
        )


def import_t40118(
    scenario: dict[str, Any], *, backend: str = "extractive", until: int | None = None
) -> Ticket:
    """Import the reference ticket (its first `until` turns) on a standard-8k class with the given summarizer.

    An existing standard-8k class is used as it is, as the importer does.
    """
    TicketClass.objects.get_or_create(
        slug="standard-8k",
        defaults={
            "token_budget": 8000,
            "compaction_threshold": 0.8,
            "summarizer_backend": backend,
            "summarizer_model": "cheap-summarizer",
        },
    )
    doc = copy.deepcopy(scenario)
    if until is not None:
        doc["turns"] = doc["turns"][:until]
    import_ticket(ImportTicket.model_validate(doc))
    return Ticket.objects.get(ticket_id=scenario["ticket_id"])
