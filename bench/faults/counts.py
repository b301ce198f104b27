"""Lost and doubled writes: what the agents' own logs say was done, against what the database holds.

A turn or a constraint carries a unique marker in its text (`[lf:<ticket>:<round><part>]`), an action its
Idempotency-Key. A write the desk acknowledged and the database lacks is *lost*; every copy past the first is
*doubled*; a write the agent gave up on is reported apart (present or absent). A settle the desk acknowledged must
leave its action succeeded.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from compaction.models import CompactionEvent
from tickets.models import PinnedState, Turn

MARKER = re.compile(r"\[lf:[^\]\s]+\]")


@dataclass
class Tally:
    written: int = 0  # distinct writes the agents attempted
    acked: int = 0
    found: int = 0  # distinct markers in the database
    lost: int = 0  # acknowledged, not in the database
    doubled: int = 0  # copies past the first
    unacked_present: int = 0  # the agent gave up, the desk had recorded it
    unacked_absent: int = 0
    unexpected: int = 0  # in the database, never attempted by an agent

    def as_json(self) -> dict[str, int]:
        return asdict(self)


def tally(written: Iterable[tuple[str, bool]], found: Counter[str]) -> Tally:
    """`written`: (marker, acknowledged) as the agents logged them (a marker may repeat: a retried write logs
    once per outcome, acknowledged wins); `found`: how many times each marker is in the database."""
    acked: dict[str, bool] = {}
    for marker, ok in written:
        acked[marker] = acked.get(marker, False) or ok
    result = Tally(written=len(acked), acked=sum(acked.values()), found=sum(1 for n in found.values() if n))
    for marker, ok in acked.items():
        present = found.get(marker, 0) > 0
        if ok and not present:
            result.lost += 1
        elif not ok:
            result.unacked_present += present
            result.unacked_absent += not present
    for marker, copies in found.items():
        result.doubled += max(0, copies - 1)
        result.unexpected += marker not in acked and copies > 0
    return result


@dataclass
class Counts:
    turns: Tally
    actions: Tally
    constraints: Tally
    settles_lost: int  # a settle acknowledged, its action not succeeded
    intents_unsettled: int  # actions still `intended` at the end
    actions_doubled_by_item: (
        int  # two recorded actions of one item on one ticket (each round refunds its own)
    )
    compactions: dict[str, int]

    @property
    def lost_or_doubled(self) -> int:
        return (
            sum(t.lost + t.doubled + t.unexpected for t in (self.turns, self.actions, self.constraints))
            + self.settles_lost
            + self.actions_doubled_by_item
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "turns": self.turns.as_json(),
            "actions": self.actions.as_json(),
            "state_changes": self.constraints.as_json(),
            "settles_lost": self.settles_lost,
            "intents_unsettled": self.intents_unsettled,
            "actions_doubled_by_item": self.actions_doubled_by_item,
            "compactions": self.compactions,
            "lost_or_doubled": self.lost_or_doubled,
        }


def count(log: Iterable[dict[str, Any]], tickets: list[str]) -> Counts:
    """Count the agents' log (Written.as_json() entries) against the database's rows for `tickets`."""
    entries = list(log)
    turn_markers: Counter[str] = Counter()
    for content in Turn.objects.filter(ticket__ticket_id__in=tickets).values_list("content", flat=True):
        turn_markers.update(MARKER.findall(content))

    action_keys: Counter[str] = Counter()
    constraint_markers: Counter[str] = Counter()
    status_by_key: dict[str, str] = {}
    by_item: Counter[tuple[str, str]] = Counter()
    states = PinnedState.objects.filter(ticket__ticket_id__in=tickets).select_related("ticket__ticket_class")
    for state in states:
        items = state.items
        for action in items.actions_taken:
            if action.idempotency_key:
                action_keys[action.idempotency_key] += 1
                status_by_key[action.idempotency_key] = str(action.status)
            if not action.reversed and str(action.status) != "failed":
                by_item[(state.ticket.ticket_id, action.item)] += 1
        for constraint in items.customer_constraints:
            constraint_markers.update(MARKER.findall(constraint.text))

    def of(kind: str) -> list[tuple[str, bool]]:
        return [(e["marker"], bool(e["acked"])) for e in entries if e["kind"] == kind]

    settled = {e["marker"] for e in entries if e["kind"] == "settle" and e["acked"]}
    compactions = Counter(
        str(s)
        for s in CompactionEvent.objects.filter(ticket__ticket_id__in=tickets).values_list(
            "status", flat=True
        )
    )
    return Counts(
        turns=tally(of("turn"), turn_markers),
        actions=tally(of("action"), action_keys),
        constraints=tally(of("constraint"), constraint_markers),
        settles_lost=sum(1 for key in settled if status_by_key.get(key) != "succeeded"),
        intents_unsettled=sum(1 for s in status_by_key.values() if s == "intended"),
        actions_doubled_by_item=sum(n - 1 for n in by_item.values() if n > 1),
        compactions=dict(sorted(compactions.items())),
    )
