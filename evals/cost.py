"""What a compaction cost and saved: the pure logic lives in `core.cost` (the pages use it too); re-exported
here for the eval's callers."""

from __future__ import annotations

from core.cost import (
    MILLION,
    WORKING_ROLES,
    CompactionCost,
    Prices,
    TicketCost,
    compaction_cost,
    summed,
    ticket_cost,
)

__all__ = [
    "MILLION",
    "WORKING_ROLES",
    "CompactionCost",
    "Prices",
    "TicketCost",
    "compaction_cost",
    "summed",
    "ticket_cost",
]
