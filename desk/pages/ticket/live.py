"""What happened on a ticket since its page was opened: the turns, compactions and refused attempts
newer than the marks the page was drawn with, for the page's polling (htmx, conditional on an ETag)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db.models import Max

from compaction.models import CompactionEvent
from tickets.models import RefusedAttempt, Ticket, Turn

LIVE_TURNS_SHOWN = 10  # the newest of the new turns listed; the rest are counted
LIVE_COMPACTIONS_SHOWN = (
    10  # likewise the newest of the new compactions (numbered with no gap: counted by number)
)
LIVE_REFUSED_SHOWN = 10  # and of the new refused attempts


@dataclass(frozen=True)
class Marks:
    """How far the page had seen: its newest turn, compaction number and refused attempt's id."""

    turn: int = 0
    compaction: int = 0
    refused: int = 0


def marks_now(ticket: Ticket) -> Marks:
    """The ticket's marks as they are now (two aggregate queries; the turn count is the ticket's)."""
    compaction = CompactionEvent.objects.filter(ticket=ticket).aggregate(n=Max("number"))["n"] or 0
    refused = RefusedAttempt.objects.filter(ticket=ticket).aggregate(n=Max("pk"))["n"] or 0
    return Marks(turn=ticket.turn_count, compaction=compaction, refused=refused)


def live_etag(now: Marks, opened: Marks, status: str) -> str:
    """Changes whenever the answer would: anything new on the ticket, or a poll from another opening."""
    text = f"{now.turn}:{now.compaction}:{now.refused}:{status}|{opened.turn}:{opened.compaction}:{opened.refused}"
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


@dataclass(frozen=True)
class LiveNews:
    opened: Marks
    now: Marks
    turns: list[Turn]
    compactions: list[CompactionEvent]
    refused: list[RefusedAttempt]

    @property
    def new_turns(self) -> int:
        return max(0, self.now.turn - self.opened.turn)

    @property
    def anything(self) -> bool:
        return bool(self.new_turns or self.compactions or self.refused)

    @property
    def turns_not_listed(self) -> int:
        return self.new_turns - len(self.turns)

    @property
    def more_refused(self) -> bool:
        """More refused attempts are new than are listed (they are not counted: their ids have gaps)."""
        return len(self.refused) >= LIVE_REFUSED_SHOWN

    @property
    def new_compactions(self) -> int:
        return max(len(self.compactions), self.now.compaction - self.opened.compaction)


def live_news(ticket: Ticket, opened: Marks, now: Marks) -> LiveNews:
    """The turns after `opened.turn` (the newest `LIVE_TURNS_SHOWN`, oldest first), the compactions
    numbered after `opened.compaction` and the refused attempts after `opened.refused` (the newest
    `LIVE_COMPACTIONS_SHOWN` and `LIVE_REFUSED_SHOWN`, oldest first): bounded, however old the marks."""
    turns: list[Turn] = []
    if now.turn > opened.turn:
        newest = Turn.objects.filter(ticket=ticket, number__gt=opened.turn).order_by("-number")
        turns = list(newest[:LIVE_TURNS_SHOWN])[::-1]
    compactions: list[CompactionEvent] = []
    if now.compaction > opened.compaction:
        compactions = list(
            CompactionEvent.objects.filter(ticket=ticket, number__gt=opened.compaction)
            .defer("summary", "coverage", "validation_errors")
            .order_by("-number")[:LIVE_COMPACTIONS_SHOWN]
        )[::-1]
    refused = list(
        RefusedAttempt.objects.filter(ticket=ticket, pk__gt=opened.refused)
        .defer("request")
        .order_by("-pk")[:LIVE_REFUSED_SHOWN]
    )[::-1]
    return LiveNews(opened=opened, now=now, turns=turns, compactions=compactions, refused=refused)
