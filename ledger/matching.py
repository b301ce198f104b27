"""The reconciler's rule, as a plain function over plain data (no database).

An entry matches a succeeded money action by reference first (the action's `external_ref` is the entry's
`external_ref` or its id), else by kind, amount and time: the nearest action of the same kind and amount
within the window. An entry that finds an action of its kind in the window only with another amount is
`amount_differs`; one that finds none is `unrecorded` (money moved the state does not know). An action left
over is `unconfirmed` once it is older than the grace period (the ledger may simply be late before that).
An entry that names a ticket matches only that ticket's actions; one that names an order, any of its tickets'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class EntryFact:
    pk: int
    entry_id: str
    ticket_pk: int | None
    kind: str
    amount_cents: int
    occurred_at: datetime
    external_ref: str


@dataclass(frozen=True)
class ActionFact:
    ticket_pk: int
    action_id: str
    kind: str
    amount_cents: int
    at: datetime
    external_ref: str
    tool: str


@dataclass(frozen=True)
class Found:
    outcome: str  # matched, unrecorded, unconfirmed, amount_differs
    kind: str
    entry: EntryFact | None = None
    action: ActionFact | None = None
    matched_by: str = ""

    @property
    def ticket_pk(self) -> int | None:
        if self.action is not None:
            return self.action.ticket_pk
        return self.entry.ticket_pk if self.entry is not None else None

    def explanation(self) -> str:
        entry, action = self.entry, self.action
        if entry is not None and action is not None:
            if self.outcome == "matched":
                how = "its reference" if self.matched_by == "external_ref" else "kind, amount and time"
                return f"ledger entry {entry.entry_id} confirms {action.action_id} ({action.tool}) by {how}"
            return (
                f"ledger entry {entry.entry_id} moved {entry.amount_cents} cents ({entry.kind}) but "
                f"{action.action_id} ({action.tool}) records {action.amount_cents} cents"
            )
        if entry is not None:
            return (
                f"ledger entry {entry.entry_id}: a {entry.kind} of {entry.amount_cents} cents at "
                f"{entry.occurred_at:%Y-%m-%d %H:%M} UTC that no action on the ticket records"
            )
        assert action is not None
        return (
            f"{action.action_id} ({action.tool}, {action.amount_cents} cents) succeeded at "
            f"{action.at:%Y-%m-%d %H:%M} UTC and the ledger has no entry for it"
        )


def _may_match(entry: EntryFact, action: ActionFact) -> bool:
    return entry.ticket_pk is None or entry.ticket_pk == action.ticket_pk


def reconcile(
    entries: list[EntryFact],
    actions: list[ActionFact],
    *,
    now: datetime,
    window: timedelta,
    grace: timedelta,
) -> list[Found]:
    """Every entry's and every old-enough action's outcome; each entry and action used at most once."""
    found: list[Found] = []
    free = list(actions)
    waiting: list[EntryFact] = []
    by_ref = {a.external_ref: a for a in actions if a.external_ref}
    for entry in sorted(entries, key=lambda e: (e.occurred_at, e.pk)):
        action = by_ref.get(entry.external_ref) if entry.external_ref else None
        action = action or by_ref.get(entry.entry_id)
        if action is not None and action in free and _may_match(entry, action):
            free.remove(action)
            same = action.kind == entry.kind and action.amount_cents == entry.amount_cents
            found.append(
                Found(
                    "matched" if same else "amount_differs",
                    entry.kind,
                    entry,
                    action,
                    matched_by="external_ref",
                )
            )
        else:
            waiting.append(entry)

    def nearest(entry: EntryFact, *, same_amount: bool) -> ActionFact | None:
        candidates = [
            a
            for a in free
            if a.kind == entry.kind
            and _may_match(entry, a)
            and abs(a.at - entry.occurred_at) <= window
            and (a.amount_cents == entry.amount_cents) == same_amount
            # An action the payment system named by a reference is that reference's, not this entry's.
            and not (a.external_ref and entry.external_ref and a.external_ref != entry.external_ref)
        ]
        return min(candidates, key=lambda a: (abs(a.at - entry.occurred_at), a.action_id), default=None)

    # Exact amounts first, for every entry, so that a differing amount never takes an exact entry's action.
    unmatched: list[EntryFact] = []
    for entry in waiting:
        action = nearest(entry, same_amount=True)
        if action is None:
            unmatched.append(entry)
            continue
        free.remove(action)
        found.append(Found("matched", entry.kind, entry, action, matched_by="window"))
    for entry in unmatched:
        action = nearest(entry, same_amount=False)
        if action is None:
            found.append(Found("unrecorded", entry.kind, entry))
            continue
        free.remove(action)
        found.append(Found("amount_differs", entry.kind, entry, action, matched_by="window"))
    for action in free:
        if now - action.at >= grace:
            found.append(Found("unconfirmed", action.kind, action=action))
    return found
