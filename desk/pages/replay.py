"""The replay read: the exact request the agent was given right after turn N, with the figures in force
then and the state changes that turn brought, as diffs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compaction.models import CompactionEvent
from compaction.selectors import assemble_context
from core.context import AssembledContext
from desk.pages.ticket import AuditRow, audit_rows
from tickets.models import StateChange, Ticket, Turn


@dataclass(frozen=True)
class Replay:
    turn: int
    context: AssembledContext
    messages: list[dict[str, Any]]
    active_compaction: int | None
    # The compaction that replaced turns right after this turn was stored, if any: then the stored
    # figure is the request before it and the total the request after it.
    compacted_at_turn: int | None
    stored: Turn  # the turn's own figures: context size when stored, budget and threshold in force
    changes: list[AuditRow]  # what the pinned state gained at this turn

    @property
    def threshold_tokens(self) -> int:
        return self.stored.threshold_tokens or self.context.threshold_tokens

    @property
    def token_budget(self) -> int:
        return self.stored.token_budget or self.context.token_budget


def replay(ticket: Ticket, turn: int) -> Replay:
    """The request right after `turn` (the state, summary and turns then), and that turn's figures."""
    context = assemble_context(ticket, through_turn=turn)
    active_row = (
        CompactionEvent.objects.filter(ticket=ticket, at_turn__lte=turn)
        .applied()
        .order_by("-number")
        .values_list("number", "at_turn")
        .first()
    )
    active = active_row[0] if active_row else None
    compacted = active_row[0] if active_row and active_row[1] == turn else None
    stored = Turn.objects.only("number", "context_tokens", "token_budget", "threshold_tokens").get(
        ticket=ticket, number=turn
    )
    changes = list(
        StateChange.objects.filter(ticket=ticket, thread_turn=turn)
        .select_related("actor")
        .order_by("to_version")
    )
    return Replay(
        turn=turn,
        context=context,
        messages=context.messages(),
        active_compaction=active,
        compacted_at_turn=compacted,
        stored=stored,
        changes=audit_rows(changes),
    )
