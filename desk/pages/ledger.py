"""The ledger's parts of the pages: the ticket page's panel, its resolution form, the queue flag's words.

Kept apart from the page modules they appear in, so each page includes them with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms

from ledger.models import Outcome, Reconciliation, Resolution
from ledger.selectors import LEDGER_COUNT_KEYS, open_mismatch_counts, ticket_outcomes
from ledger.services import missed_action_tool
from tickets.models import Ticket

# What a supervisor may do about each mismatch.
RESOLUTIONS_FOR: dict[str, tuple[str, ...]] = {
    Outcome.UNRECORDED: (Resolution.ADDED_ACTION, Resolution.ACCEPTED),
    Outcome.UNCONFIRMED: (Resolution.MARKED_FAILED, Resolution.ACCEPTED),
    Outcome.AMOUNT_DIFFERS: (Resolution.ACCEPTED,),
}
# What each mismatch means, for the people reading the panel.
MEANING: dict[str, str] = {
    Outcome.UNRECORDED: "The payment system moved this money and no action on the ticket records it: the pinned "
    "state under-reports, and an agent reading it could pay again.",
    Outcome.UNCONFIRMED: "The ticket records this money as moved, but the ledger has no entry for it after the grace "
    "period: the tool may have failed after the agent recorded success.",
    Outcome.AMOUNT_DIFFERS: "The ledger and the ticket agree the money moved but not on how much.",
}
# The queue flag's words for a ticket's first open mismatch.
QUEUE_FLAG_WORDS: dict[str, str] = {
    Outcome.UNRECORDED: "ledger: unrecorded money",
    Outcome.UNCONFIRMED: "ledger: unconfirmed action",
    Outcome.AMOUNT_DIFFERS: "ledger: amount differs",
}


@dataclass(frozen=True)
class LedgerRow:
    outcome: Reconciliation
    choices: tuple[tuple[str, str], ...]
    meaning: str
    missed_tool: str

    @property
    def is_open(self) -> bool:
        return self.outcome.is_open


@dataclass(frozen=True)
class LedgerPanel:
    rows: list[LedgerRow] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def open_count(self) -> int:
        return sum(1 for row in self.rows if row.is_open)


def ledger_panel(ticket: Ticket) -> LedgerPanel:
    """The ticket's reconciliation outcomes for its page, the open mismatches first (one query)."""
    rows = []
    counts = dict.fromkeys((*LEDGER_COUNT_KEYS, "accepted"), 0)
    labels = dict(Resolution.choices)
    for outcome in ticket_outcomes(ticket):
        if outcome.outcome != Outcome.MATCHED and outcome.accepted_at is not None:
            counts["accepted"] += 1
        else:
            counts[outcome.outcome] += 1
        rows.append(
            LedgerRow(
                outcome=outcome,
                choices=tuple((r, labels[r]) for r in RESOLUTIONS_FOR.get(outcome.outcome, ())),
                meaning=MEANING.get(outcome.outcome, ""),
                missed_tool=missed_action_tool(ticket, outcome.kind)
                if outcome.outcome == Outcome.UNRECORDED
                else "",
            )
        )
    return LedgerPanel(rows=rows, counts=counts)


def ledger_metrics() -> dict[str, Any]:
    """The open mismatches of every ticket, for the metrics page (one query)."""
    return open_mismatch_counts()


class LedgerResolutionForm(forms.Form):
    resolution = forms.ChoiceField(choices=Resolution.choices)
    reason = forms.CharField(max_length=2000, strip=True)
    tool = forms.CharField(max_length=100, required=False, strip=True)

    def error_text(self) -> str:
        return "; ".join(
            f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in self.errors.items()
        )
