"""Writes to the ledger: entries in (validate all, then write), the reconciler, supervisors' resolutions.

Every function here is one transaction. The reconciler locks the order's tickets (the rows an action's
settle locks too), so it reads the succeeded actions and writes its outcomes without an action moving under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from core.errors import DeskError, InvalidInput
from core.vocabulary import ActionStatus, ActorKind, StateOp
from ledger.entries import EntryIn
from ledger.matching import ActionFact, EntryFact, Found, reconcile
from ledger.models import LedgerEntry, LedgerResolution, LedgerSource, Outcome, Reconciliation, Resolution
from tickets.models import PinnedState, StateChange, Ticket
from tickets.services.actors import Actor
from tickets.services.state_changes import change_pinned_state, correct_state, lock_pinned_state


class LedgerRejected(DeskError):
    """Entries refused as a whole: nothing of them was written. `errors` names each entry and field."""

    code = "invalid_ledger"


class LedgerEntryConflict(DeskError):
    """An entry id the desk already holds, sent again with other content."""

    code = "entry_conflict"


@dataclass(frozen=True)
class EntryError:
    where: str  # "line 3", "entries[2]"
    field: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"where": self.where, "field": self.field, "message": self.message}

    def __str__(self) -> str:
        return (
            f"{self.where}: {self.field}: {self.message}" if self.field else f"{self.where}: {self.message}"
        )


def refuse(errors: Sequence[EntryError], *, conflict: bool = False) -> DeskError:
    count = len(errors)
    head = "; ".join(str(e) for e in errors[:5]) + (f"; and {count - 5} more" if count > 5 else "")
    cls = LedgerEntryConflict if conflict else LedgerRejected
    noun = "entry" if count == 1 else "entries"
    return cls(f"{count} {noun} refused, nothing written: {head}", errors=[e.as_json() for e in errors])


@dataclass
class Ingested:
    created: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "received": len(self.created) + len(self.duplicates),
            "created": self.created,
            "duplicates": self.duplicates,
            "reconciliation": self.outcomes,
        }


def ingest_ledger_entries(
    *, entries: Sequence[tuple[str, EntryIn]], source: str = LedgerSource.WEBHOOK, now: datetime | None = None
) -> Ingested:
    """Store validated entries (each with where it came from, for the errors) and reconcile their orders.

    Every entry is checked before one is written: its ticket or order must be one the desk has, and an id the
    desk already holds (or that the batch holds twice) must come with the same content, when it is a no-op
    (idempotent on the id); otherwise LedgerRejected or LedgerEntryConflict, and nothing is written. When a
    concurrent request stored one of the ids first (the same delivery retried at once), the check runs again
    and finds it held.
    """
    try:
        return _ingest(entries=entries, source=source, now=now)
    except IntegrityError:
        return _ingest(entries=entries, source=source, now=now)


@transaction.atomic
def _ingest(*, entries: Sequence[tuple[str, EntryIn]], source: str, now: datetime | None) -> Ingested:
    if source not in LedgerSource.values:
        raise InvalidInput(f"unknown ledger source {source!r}", field="source")
    ticket_ids = {e.ticket_id for _, e in entries if e.ticket_id}
    order_ids = {e.order_id for _, e in entries if e.order_id}
    tickets = {
        t.ticket_id: t for t in Ticket.objects.filter(ticket_id__in=ticket_ids).only("ticket_id", "order_id")
    }
    known_orders = set(Ticket.objects.filter(order_id__in=order_ids).values_list("order_id", flat=True))
    held = {e.entry_id: e.raw for e in LedgerEntry.objects.filter(entry_id__in={e.id for _, e in entries})}

    errors: list[EntryError] = []
    conflicts: list[EntryError] = []
    seen: dict[str, dict[str, Any]] = {}
    rows: list[LedgerEntry] = []
    result = Ingested()
    for where, entry in entries:
        raw = entry.raw()
        ticket = tickets.get(entry.ticket_id) if entry.ticket_id else None
        if entry.ticket_id and ticket is None:
            errors.append(EntryError(where, "ticket_id", f"no ticket {entry.ticket_id!r}"))
            continue
        if ticket is None and entry.order_id not in known_orders:
            errors.append(EntryError(where, "order_id", f"no ticket carries order {entry.order_id!r}"))
            continue
        if ticket is not None and entry.order_id and entry.order_id != ticket.order_id:
            errors.append(
                EntryError(where, "order_id", f"ticket {ticket.ticket_id} is for order {ticket.order_id!r}")
            )
            continue
        earlier = held.get(entry.id, seen.get(entry.id))
        if earlier is not None:
            if earlier != raw:
                conflicts.append(
                    EntryError(where, "id", f"entry {entry.id!r} was received before with other content")
                )
            elif entry.id not in result.duplicates:
                result.duplicates.append(entry.id)
            continue
        seen[entry.id] = raw
        rows.append(
            LedgerEntry(
                entry_id=entry.id,
                ticket=ticket,
                order_id=ticket.order_id if ticket is not None else entry.order_id or "",
                kind=entry.kind,
                amount_cents=entry.amount_cents,
                currency=entry.currency,
                occurred_at=entry.created_at,
                external_ref=entry.external_ref or "",
                raw=raw,
                source=source,
            )
        )
    if errors:
        raise refuse(errors)
    if conflicts:
        raise refuse(conflicts, conflict=True)
    LedgerEntry.objects.bulk_create(rows)
    result.created = [row.entry_id for row in rows]
    if rows:
        result.outcomes = reconcile_orders(order_ids={row.order_id for row in rows}, now=now)
    return result


def _window() -> timedelta:
    return timedelta(minutes=settings.SUNDRY_LEDGER_MATCH_WINDOW_MINUTES)


def _grace() -> timedelta:
    return timedelta(minutes=settings.SUNDRY_LEDGER_GRACE_MINUTES)


def _action_facts(tickets: list[Ticket]) -> list[ActionFact]:
    """The tickets' succeeded money actions, each with the time it succeeded (its newest audit row)."""
    states = PinnedState.objects.select_related("ticket__ticket_class").filter(ticket__in=tickets)
    times = {
        (row["ticket_id"], row["subject_id"]): row["at"]
        for row in StateChange.objects.filter(
            ticket__in=tickets,
            op__in=[StateOp.ACTION_TAKEN, StateOp.ACTION_SETTLED, StateOp.ACTION_ADDED],
        )
        .exclude(subject_id="")
        .values("ticket_id", "subject_id")
        .annotate(at=Max("created_at"))
        .order_by()
    }
    facts = []
    for pinned in states:
        items = pinned.items
        for action in items.actions_taken:
            effect = items.tools.money_effect(action.tool)
            if (
                effect is None
                or action.status != ActionStatus.SUCCEEDED
                or action.reversed
                or not action.amount_cents
            ):
                continue
            at = times.get((pinned.ticket_id, action.id)) or action.intended_at or pinned.updated_at
            facts.append(
                ActionFact(
                    ticket_pk=pinned.ticket_id,
                    action_id=action.id,
                    kind=effect,
                    amount_cents=action.amount_cents,
                    at=at,
                    external_ref=action.external_ref or "",
                    tool=action.tool,
                )
            )
    return facts


def _key(entry_pk: int | None, ticket_pk: int, action_id: str, outcome: str) -> tuple[Any, ...]:
    return (entry_pk, ticket_pk, action_id, outcome)


@transaction.atomic
def reconcile_orders(*, order_ids: Iterable[str], now: datetime | None = None) -> dict[str, int]:
    """Reconcile each order's ledger entries with its tickets' succeeded money actions, and store the outcomes.

    An outcome found again stays as it was (its time, and an acceptance); the others are replaced. An
    unrecorded entry that named only the order goes to the order's newest ticket. The counts, by outcome.
    """
    now = now or timezone.now()
    counts = dict.fromkeys(Outcome.values, 0)
    for order_id in sorted(set(order_ids)):
        tickets = list(Ticket.objects.select_for_update().filter(order_id=order_id).order_by("pk"))
        if not tickets:
            continue
        entries = [
            EntryFact(
                pk=e.pk,
                entry_id=e.entry_id,
                ticket_pk=e.ticket_id,
                kind=e.kind,
                amount_cents=e.amount_cents,
                occurred_at=e.occurred_at,
                external_ref=e.external_ref,
            )
            for e in LedgerEntry.objects.filter(order_id=order_id)
        ]
        found = reconcile(entries, _action_facts(tickets), now=now, window=_window(), grace=_grace())
        newest = tickets[-1].pk
        wanted: dict[tuple[Any, ...], Found] = {}
        for f in found:
            ticket_pk = f.ticket_pk or newest
            wanted[
                _key(
                    f.entry.pk if f.entry else None,
                    ticket_pk,
                    f.action.action_id if f.action else "",
                    f.outcome,
                )
            ] = f
            counts[f.outcome] += 1
        existing = Reconciliation.objects.filter(ticket__in=tickets)
        kept = set()
        stale = []
        for row in existing:
            key = _key(row.entry_id, row.ticket_id, row.action_id, row.outcome)
            if key in wanted and key not in kept:
                kept.add(key)
            else:
                stale.append(row.pk)
        Reconciliation.objects.filter(pk__in=stale).delete()
        Reconciliation.objects.bulk_create(
            Reconciliation(
                ticket_id=key[1],
                entry_id=key[0],
                action_id=key[2],
                outcome=f.outcome,
                kind=f.kind,
                entry_amount_cents=f.entry.amount_cents if f.entry else None,
                action_amount_cents=f.action.amount_cents if f.action else None,
                matched_by=f.matched_by,
                explanation=f.explanation(),
            )
            for key, f in wanted.items()
            if key not in kept
        )
    return counts


def reconcile_all(*, now: datetime | None = None) -> dict[str, int]:
    """Every order that has ledger entries or reconciliation outcomes (the command's run)."""
    orders = set(LedgerEntry.objects.values_list("order_id", flat=True).distinct()) | set(
        Reconciliation.objects.values_list("ticket__order_id", flat=True).distinct()
    )
    # Actions waiting for their entry on orders the ledger never mentioned are unconfirmed too.
    orders |= _orders_with_money_actions()
    return reconcile_orders(order_ids=orders, now=now)


def _orders_with_money_actions() -> set[str]:
    return set(
        StateChange.objects.filter(
            op__in=[StateOp.ACTION_TAKEN, StateOp.ACTION_SETTLED, StateOp.ACTION_ADDED]
        )
        .values_list("ticket__order_id", flat=True)
        .distinct()
    )


def missed_action_tool(ticket: Ticket, kind: str) -> str:
    """The tool a missed action of this kind is recorded with: the usual name (`issue_refund`) when the class
    lists it with that effect, else the class's first plain money tool of it."""
    usual = {"refund": "issue_refund", "charge": "charge", "credit": "issue_credit"}[kind]
    tools = ticket.ticket_class.money_tools or {}
    if tools.get(usual) == kind:
        return usual
    for tool, effect in tools.items():
        if effect == kind and not any(c in tool for c in "*?["):
            return str(tool)
    return usual


@transaction.atomic
def resolve_ledger_mismatch(
    *, ticket: Ticket, reconciliation_id: int, resolution: str, reason: str, by: Actor, tool: str = ""
) -> LedgerResolution:
    """A supervisor's answer to a mismatch: add the missed action (an unrecorded entry, through the state
    correction), mark the action failed (an unconfirmed one: the money never moved), or accept it with a
    reason. Audited (LedgerResolution, and the state's own audit for a change to it); the order is then
    reconciled again."""
    if by.kind != ActorKind.SUPERVISOR or by.user is None:
        raise InvalidInput("only a supervisor resolves a ledger mismatch", field="by")
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("a resolution needs a reason", field="reason")
    if resolution not in Resolution.values:
        raise InvalidInput(
            f"unknown resolution {resolution!r}: one of {', '.join(Resolution.values)}", field="resolution"
        )
    pinned = lock_pinned_state(ticket)
    row = (
        Reconciliation.objects.select_for_update(of=("self",))
        .select_related("entry")
        .filter(pk=reconciliation_id, ticket=pinned.ticket)
        .first()
    )
    if row is None or not row.is_open:
        raise InvalidInput("no open ledger mismatch with that id on this ticket", field="reconciliation")
    entry = row.entry
    action_id = row.action_id
    if resolution == Resolution.ADDED_ACTION:
        if row.outcome != Outcome.UNRECORDED or entry is None:
            raise InvalidInput(
                "only money the ledger saw and no action records can be added", field="resolution"
            )
        corrected = correct_state(
            ticket=ticket,
            by=by,
            # Where the action comes from, in the audited reason (the state's provenance, once it has one).
            reason=f"{reason} (from ledger entry {entry.entry_id})",
            expected_version=pinned.version,
            op=StateOp.ACTION_ADDED,
            tool=(tool or "").strip() or missed_action_tool(pinned.ticket, entry.kind),
            amount_cents=entry.amount_cents,
            external_ref=entry.external_ref or entry.entry_id,
        )
        action_id = corrected.items.actions_taken[-1].id
    elif resolution == Resolution.MARKED_FAILED:
        if row.outcome != Outcome.UNCONFIRMED or not action_id:
            raise InvalidInput("only an action the ledger never saw can be marked failed", field="resolution")
        action = pinned.items.find_action(action_id)
        change_pinned_state(
            ticket=ticket,
            op=StateOp.ACTION_SETTLED,
            by=by,
            mutate=lambda items: items.settle_action(
                action_id=action_id,
                status=ActionStatus.FAILED,
                reason=f"{reason} (the ledger has no entry for it)",
            ),
            at_turn=action.at_turn if action else None,
            reason=reason,
            locked=pinned,
        )
    else:
        row.accepted_at = timezone.now()
        row.accepted_by = by.user
        row.accepted_reason = reason
        row.save(update_fields=["accepted_at", "accepted_by", "accepted_reason", "updated_at"])
    answer = LedgerResolution.objects.create(
        ticket=pinned.ticket,
        resolution=resolution,
        outcome=row.outcome,
        entry_id=entry.entry_id if entry else "",
        action_id=action_id,
        explanation=row.explanation,
        reason=reason,
        by=by.user,
    )
    reconcile_orders(order_ids=[pinned.ticket.order_id])
    return answer
