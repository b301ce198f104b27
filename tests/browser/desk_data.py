"""Builders shared by the dashboard's view and browser tests: named users and the reference ticket."""

from __future__ import annotations

import json
from typing import Any

from desk.importer import ImportTicket, import_ticket
from tests.factories import (
    PASSWORD as PASSWORD,  # the named users live in tests/factories.py, re-exported here
)
from tests.factories import admin as admin
from tests.factories import agent as agent
from tests.factories import ensure_roles as ensure_roles
from tests.factories import import_t40118 as import_t40118
from tests.factories import supervisor as supervisor
from tests.fake_openai import Reply
from tickets.models import Ticket

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"><b>bold?</b>'


def import_lossy_t40118(scenario: dict[str, Any], openai_server: Any) -> Ticket:
    """T-40118 compacted at turn 22 by an OpenAI-compatible summarizer that returns the seed's lossy
    summary (the $40 garden-table refund left out), served by the loopback fake."""
    lossy = {k: v for k, v in scenario["lossy_summary_turns_1_14"].items() if k != "why"}
    with openai_server([Reply(content=json.dumps(lossy), prompt_tokens=5200, completion_tokens=80)]):
        return import_t40118(scenario, backend="openai")


def import_seed_t40118(scenario: dict[str, Any], *, until: int | None = None) -> Ticket:
    """T-40118 on the demo's seed class: the scripted summarizer replays the seed's lossy summary."""
    from desk.demo import SEED_CLASS
    from tickets.models import TicketClass

    TicketClass.objects.get_or_create(slug=SEED_CLASS["slug"], defaults=SEED_CLASS)
    doc = {**scenario, "ticket_class": SEED_CLASS["slug"]}
    if until is not None:
        doc["turns"] = doc["turns"][:until]
    import_ticket(ImportTicket.model_validate(doc))
    return Ticket.objects.get(ticket_id=scenario["ticket_id"])


def hostile_ticket(ticket_id: str = "T-666") -> Ticket:
    """A short ticket whose customer text and tool arguments carry HTML and script."""
    doc = {
        "ticket_id": ticket_id,
        "order_id": "SU-666",
        "seller_type": "marketplace",
        "ticket_class": {"slug": "small-4k", "token_budget": 4000, "compaction_threshold": 0.75},
        "turns": [
            {
                "role": "customer",
                "content": HOSTILE,
                "events": [{"type": "constraint_stated", "text": HOSTILE}],
            },
            {"role": "tool_call", "tool": "lookup_order", "tool_call_id": "c1", "args": {"note": HOSTILE}},
            {"role": "tool_result", "tool": "lookup_order", "tool_call_id": "c1", "content": HOSTILE},
            {"role": "agent", "content": "Looking into it.", "boundary": "reply_sent"},
        ],
    }
    import_ticket(ImportTicket.model_validate(doc))
    return Ticket.objects.get(ticket_id=ticket_id)
