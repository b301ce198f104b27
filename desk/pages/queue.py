"""The queue's read: tickets with their class, pinned state, compaction count and flags, one query a page.

Pages are keyset (seek) pages: each starts after or before a cursor, the sort key and the primary key of
a row, so the database reads the page's rows from an index and nothing before them, however deep the
page. The count is exact up to a cap and an estimate past it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Exists,
    ExpressionWrapper,
    F,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan, TupleLessThan
from django.db.models.functions import Now

from compaction.services import state_room
from core.identity import ToolCatalog
from core.state import ActionFigures
from ledger.models import Reconciliation
from tickets.models import Ticket, TicketClass
from tickets.served_state import TailTotal

QUEUE_PAGE_SIZE = 50
# Up to this many matching tickets the queue counts them; past it, it says "about N" or "N+".
QUEUE_COUNT_CAP = 1000


class QueueFlag:
    NEEDS_REVIEW = "needs_review"
    COVERAGE_MISS = "coverage_miss"
    FORCED = "forced"
    FAILED = "failed"
    OVER_BUDGET = "over_budget"
    REFUSED = "refused_repeats"
    STALE_INTENTS = "stale_intents"
    STATE_FULL = "state_over_threshold"
    LEDGER = "ledger_mismatch"

    choices = (
        (NEEDS_REVIEW, "Unreviewed"),
        (COVERAGE_MISS, "Coverage misses"),
        (FORCED, "Forced or no safe cut"),
        (FAILED, "Failed compactions"),
        (OVER_BUDGET, "Over budget now"),
        (REFUSED, "Refused repeats"),
        (STALE_INTENTS, "Open intents past their timeout"),
        (STATE_FULL, "State alone over the threshold"),
        (LEDGER, "Ledger mismatches"),
    )


@dataclass(frozen=True)
class QueueFilters:
    q: str = ""
    ticket_class: str = ""
    status: str = ""
    flags: tuple[str, ...] = ()
    sort: str = "recent"


# Each sort's key, largest first. The primary key breaks ties (newest first), so the order is total
# and a cursor names one place in it; tickets_ticket has an index on each (key DESC, id DESC).
QUEUE_SORTS = {"recent": "pk", "tokens": "context_tokens", "turns": "turn_count"}

# A cursor is its sort's key and the primary key, joined by dots ("4312.98765"; "98765" for
# `recent`). Eighteen digits at most keep every value inside a bigint.
_CURSOR_PART = re.compile(r"[0-9]{1,18}")


def _key_fields(sort: str) -> tuple[str, ...]:
    field = QUEUE_SORTS.get(sort, "pk")
    return ("pk",) if field == "pk" else (field, "pk")


def cursor_of(ticket: Ticket, sort: str) -> str:
    """The cursor of a ticket's place in the queue sorted by `sort`."""
    return ".".join(str(getattr(ticket, name)) for name in _key_fields(sort))


def parse_cursor(raw: str, sort: str) -> tuple[int, ...] | None:
    """The key a cursor names for `sort`, or None when it is not one of its cursors."""
    parts = raw.split(".")
    if len(parts) != len(_key_fields(sort)) or not all(_CURSOR_PART.fullmatch(p) for p in parts):
        return None
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class QueuePosition:
    """Where a page starts: the top (nothing set), just after a cursor (older tickets), just before
    one (newer tickets), or the end of the queue."""

    after: tuple[int, ...] | None = None
    before: tuple[int, ...] | None = None
    last: bool = False


@dataclass(frozen=True)
class QueuePage:
    """One page of the queue and the cursors of its neighbours (None at either end)."""

    tickets: list[Ticket]
    newer: str | None
    older: str | None


@dataclass(frozen=True)
class QueueCount:
    """How many tickets match: exact, at least `value` (past the cap) or about `value` (estimated)."""

    value: int
    kind: Literal["exact", "at_least", "about"] = "exact"

    def __str__(self) -> str:
        noun = "ticket" if self.value == 1 and self.kind == "exact" else "tickets"
        if self.kind == "at_least":
            return f"{self.value:,}+ {noun}"
        if self.kind == "about":
            return f"about {self.value:,} {noun}"
        return f"{self.value:,} {noun}"


# A queue row's pinned state has its served texts stored for its version (PinnedState.served_*).
_STORED_CURRENT = Q(
    pinned_state__served_version=F("pinned_state__version"), pinned_state__served_tail__isnull=False
)


def queue_tickets(filters: QueueFilters) -> QuerySet[Ticket]:
    """Tickets for the queue, with their class, pinned state, compaction count and flags.

    The compaction count and the event and refusal flags are stored on the ticket (compaction.queue_figures),
    so a row reads no compaction event; the filters on them use partial indexes. The ledger mismatch is a
    correlated subquery, evaluated only for the rows of the page; the search uses the unique ticket id and
    the indexed order id. The default order is the primary key (newest first): it is indexed, unlike
    `updated_at` on its own.
    """
    tickets = (
        Ticket.objects.select_related("ticket_class", "pinned_state")
        .only(
            "ticket_id",
            "order_id",
            "seller_type",
            "status",
            "context_tokens",
            "turn_count",
            "updated_at",
            "ticket_class__slug",
            "ticket_class__token_budget",
            "ticket_class__compaction_threshold",
            "ticket_class__min_gain_share",
            "system_prompt_tokens",
            "pinned_state__version",
            "pinned_state__tokens",
            "intent_stale_at",
            # Stored, as the filter below reads it (with its partial index): Ticket.state_fills_threshold().
            "state_over_threshold",
            # Stored by compaction.queue_figures where events and refusals are written: a row reads its
            # figures, not its events.
            "compaction_count",
            "has_coverage_miss",
            "has_failed",
            "has_forced",
            "has_no_safe_cut",
            "needs_review",
            "has_refused",
            "pending_deferral",
        )
        .annotate(
            # The refund total as the served texts have it, when stored for the row's version: a row reads one
            # number, not its state (refunded_cents).
            stored_refunded_cents=TailTotal("refunded_cents_total", prefix="pinned_state__"),
            # The actions' money figures, only for a row with no current stored state (the total is derived
            # from them then).
            unstored_figures=Case(
                When(_STORED_CURRENT, then=Value(None, output_field=JSONField())),
                default=F("pinned_state__action_figures"),
                output_field=JSONField(),
            ),
            # The first open mismatch with the payments ledger (its outcome), or None.
            ledger_mismatch=Subquery(
                Reconciliation.objects.open_mismatches()
                .filter(ticket=OuterRef("pk"))
                .order_by("pk")
                .values("outcome")[:1]
            ),
            has_stale_intent=ExpressionWrapper(Q(intent_stale_at__lte=Now()), output_field=BooleanField()),
        )
    )
    q = filters.q.strip()
    if q:
        # A prefix as a range keeps both lookups on their indexes (LIKE would scan on SQLite).
        wanted = q.upper()
        after = wanted + "\uffff"
        tickets = tickets.filter(
            Q(ticket_id__gte=wanted, ticket_id__lt=after) | Q(order_id__gte=wanted, order_id__lt=after)
        )
    if filters.ticket_class:
        tickets = tickets.filter(ticket_class__slug=filters.ticket_class)
    if filters.status:
        tickets = tickets.filter(status=filters.status)
    if QueueFlag.NEEDS_REVIEW in filters.flags:
        tickets = tickets.filter(needs_review=True)
    if QueueFlag.COVERAGE_MISS in filters.flags:
        tickets = tickets.filter(has_coverage_miss=True)
    if QueueFlag.FORCED in filters.flags:
        tickets = tickets.filter(Q(has_forced=True) | Q(has_no_safe_cut=True))
    if QueueFlag.FAILED in filters.flags:
        tickets = tickets.filter(has_failed=True)
    if QueueFlag.OVER_BUDGET in filters.flags:
        # Over the budget now, not once: a ticket compacted back under it is not flagged.
        tickets = tickets.filter(context_tokens__gt=F("ticket_class__token_budget"))
    if QueueFlag.REFUSED in filters.flags:
        # The stored flag of Ticket.objects.with_refused_attempts(); the annotation below carries
        # with_stale_intents(): filtering on them keeps the page one query with its flags.
        tickets = tickets.filter(has_refused=True)
    if QueueFlag.STALE_INTENTS in filters.flags:
        tickets = tickets.filter(has_stale_intent=True)
    if QueueFlag.STATE_FULL in filters.flags:
        tickets = tickets.filter(state_over_threshold=True)
    if QueueFlag.LEDGER in filters.flags:
        tickets = tickets.filter(
            Exists(Reconciliation.objects.open_mismatches().filter(ticket=OuterRef("pk")))
        )
    return tickets.order_by(*(f"-{name}" for name in _key_fields(filters.sort)))


def queue_page(filters: QueueFilters, position: QueuePosition, *, size: int = QUEUE_PAGE_SIZE) -> QueuePage:
    """The page of the queue at `position`: one query, `size + 1` rows read from the sort's index.

    A page before a cursor, and the last page, are read in the reverse order (so the database walks
    the index from the other end) and turned back in Python. A cursor that finds nothing (its tickets
    filtered away, or a hand-made one) gives the first page.

    The page's primary keys are chosen in a subquery and the ledger's subquery computed around it:
    PostgreSQL then plans it for the page's rows, one index probe each, instead of hashing every
    reconciliation once per page as it does when it expects the whole queue (it ignores the LIMIT
    when it chooses).
    """
    fields = _key_fields(filters.sort)
    key = Tuple(*(F(name) for name in fields))
    backwards = position.last or position.before is not None
    order = fields if backwards else tuple(f"-{name}" for name in fields)
    window = queue_tickets(filters).order_by(*order)
    if position.before is not None:
        window = window.filter(TupleGreaterThan(key, position.before))
    elif position.after is not None and not backwards:
        window = window.filter(TupleLessThan(key, position.after))
    chosen = window.values("pk")[: size + 1]
    found = list(queue_tickets(QueueFilters(sort=filters.sort)).filter(pk__in=chosen).order_by(*order))
    more = len(found) > size
    found = found[:size]
    for ticket in found:
        # The state leaves too little room for a compaction to pay (core.policy.Room), from the stored counts.
        ticket.state_crowded = state_room(ticket, ticket.pinned_state.tokens).crowded  # type: ignore[attr-defined]
    if not found and position != QueuePosition():
        return queue_page(filters, QueuePosition(), size=size)
    if backwards:
        found.reverse()
        newer = cursor_of(found[0], filters.sort) if more else None
        older = None if position.last else cursor_of(found[-1], filters.sort)
    else:
        newer = None if position.after is None else cursor_of(found[0], filters.sort)
        older = cursor_of(found[-1], filters.sort) if more else None
    return QueuePage(tickets=found, newer=newer, older=older)


def queue_count(filters: QueueFilters, *, cap: int = QUEUE_COUNT_CAP) -> QueueCount:
    """The matching tickets, counted up to `cap`; past it, an estimate for the whole queue on
    PostgreSQL (the planner's row estimate, no scan) and "cap+" otherwise.

    A filtered queue past the cap says "cap+": the planner's guess for flags (EXISTS over compaction
    events) can be off by orders of magnitude, and the page should not state a figure it cannot back.
    """
    counted = queue_tickets(filters).order_by().values("pk")[: cap + 1].count()
    if counted <= cap:
        return QueueCount(counted)
    if filters == QueueFilters(sort=filters.sort):
        estimate = _estimated_tickets()
        if estimate is not None and estimate > cap:
            return QueueCount(_two_significant_digits(estimate), kind="about")
    return QueueCount(cap, kind="at_least")


def _estimated_tickets() -> int | None:
    """The planner's estimate of the ticket table's rows: its rows per page at the last ANALYZE times
    the pages it has now (as PostgreSQL itself estimates); None off PostgreSQL or before any ANALYZE."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT CASE WHEN relpages > 0"
            " THEN reltuples / relpages * (pg_relation_size(oid) / current_setting('block_size')::int)"
            " ELSE reltuples END FROM pg_class WHERE oid = %s::regclass",
            [Ticket._meta.db_table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None and row[0] > 0 else None


def _two_significant_digits(n: int) -> int:
    digits = len(str(n))
    return n if digits <= 2 else round(n, 2 - digits)


def ticket_classes() -> QuerySet[TicketClass]:
    return TicketClass.objects.order_by("slug")


def refunded_cents(ticket: Ticket) -> int:
    """The refund total of a queue row: as stored with its state's version (queue_tickets), else derived from
    the actions' money figures (read then: a state stored otherwise, or before stored states)."""
    stored = getattr(ticket, "stored_refunded_cents", None)
    if stored is not None:
        return int(stored)
    if hasattr(ticket, "unstored_figures"):
        figures = ticket.unstored_figures
    else:
        figures = ticket.pinned_state.action_figures
    return ActionFigures(figures or {}).totals(ToolCatalog.default())["refunded_cents_total"]
