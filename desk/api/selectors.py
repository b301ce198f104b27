"""Reads for the API: one access path per resource, a constant number of queries each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import QuerySet

from compaction.models import CompactionEvent
from compaction.selectors import (
    CONTEXT_TICKET,
    CompactionTotals,
    ContextFigures,
    assemble_context,
    compaction_totals,
    context_figures,
)
from compaction.selectors import (
    served_context as context_from_rows,
)
from core.context import AssembledContext
from core.state_text import stored_document
from core.tokens import RequestSize
from desk.api.fields import storable_text
from desk.history import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, HistoryPage
from desk.history import ticket_history as _ticket_history
from ledger.selectors import ticket_ledger_counts
from tickets.compiled_reads import CompiledRead
from tickets.errors import ClassNotAllowed, TicketNotFound
from tickets.models import (
    SERVED_COLUMNS,
    SERVED_TAIL,
    STORED_STATE_COLUMNS,
    AgentToken,
    PinnedState,
    Ticket,
    TicketClass,
    served_action_texts,
)
from tickets.served_state import ACTION_TEXTS


def check_ticket_id(ticket_id: str) -> None:
    """TicketNotFound for an id no ticket can have, without a query."""
    # An id that no ticket can have (too long, or with characters the database refuses) is simply unknown.
    if len(ticket_id) > 64 or not storable_text(ticket_id):
        raise TicketNotFound("no ticket with that id", ticket_id=ticket_id[:64].replace("\x00", ""))


# The agent's reads run on every turn: compiled to SQL once per process (tickets.compiled_reads) and run
# with the id of each request, so no request pays for building and compiling the joins again.
TICKET_BY_ID = CompiledRead(
    lambda ticket_id: (
        Ticket.objects.select_related("ticket_class").order_by().filter(ticket_id=ticket_id)[:2]
    ),
    str,
)
STATE_BY_TICKET_ID = CompiledRead(
    lambda ticket_id: (
        PinnedState.objects.select_related("ticket__ticket_class")
        # The items are not read: the agent-facing state is its served text, or, when none of this version
        # is stored, built from `data`, read then (one more query).
        .defer("data")
        .order_by()
        .filter(ticket__ticket_id=ticket_id)[:2]
    ),
    str,
)


# The ticket's figures need the state's version and tokens, not the state itself.
STATE_FIGURES_BY_TICKET_ID = CompiledRead(
    lambda ticket_id: (
        PinnedState.objects.select_related("ticket__ticket_class")
        .defer("data", *STORED_STATE_COLUMNS)
        .order_by()
        .filter(ticket__ticket_id=ticket_id)[:2]
    ),
    str,
)


# The state GET: the state's version and served texts (not its items nor its stored document), the ticket's
# identifiers and class id, in one query whose rows are read as the database gives them.
_SERVED_STATE_FIELDS = (
    "pk",
    "version",
    "served_version",
    "served_actions",
    *SERVED_COLUMNS.values(),
    SERVED_TAIL,
    "ticket__ticket_id",
    "ticket__order_id",
    "ticket__seller_type",
    "ticket__ticket_class_id",
)
# The actions' texts are joined only when this process holds none of the row's state and version
# (tickets.served_state.ACTION_TEXTS): the read's other two values.
SERVED_STATE_BY_TICKET_ID: CompiledRead[Any] = CompiledRead(
    lambda ticket_id, held_state, held_version: (
        PinnedState.objects.order_by()
        .filter(ticket__ticket_id=ticket_id)
        .annotate(**served_action_texts(model=False, unless=("version", held_state, held_version)))
        .values_list(*_SERVED_STATE_FIELDS)[:2]
    ),
    str,
    int,
    int,
)


@dataclass(frozen=True)
class ServedState:
    version: int
    ticket_class_id: int
    text: str | None  # the document as served; None when no texts of this version are stored


def served_state(ticket_id: str) -> ServedState | None:
    """The state GET's answer, or None for no such ticket. One query."""
    if len(ticket_id) > 64 or not storable_text(ticket_id):
        return None
    key = (DEFAULT_DB_ALIAS, ticket_id, False)
    rows = SERVED_STATE_BY_TICKET_ID.rows(ticket_id, *ACTION_TEXTS.held(key))
    if len(rows) != 1:
        return None
    pk, version, served_version, joined, *lists, tail, ticket, order, seller_type, class_id = rows[0]
    actions = ACTION_TEXTS.resolve(key, pk, version, joined)
    if actions is None:  # the copy the read relied on went meanwhile: DRF's way builds it
        return ServedState(version=version, ticket_class_id=class_id, text=None)
    text = stored_document(
        ticket=ticket,
        order=order,
        seller_type=seller_type,
        version=version,
        served_version=served_version,
        lists={"actions_taken": actions, **dict(zip(SERVED_COLUMNS, lists, strict=True))},
        tail=tail,
    )
    return ServedState(version=version, ticket_class_id=class_id, text=text)


def ticket_by_id(ticket_id: str) -> Ticket:
    """The ticket with its class (one query), or TicketNotFound."""
    check_ticket_id(ticket_id)
    try:
        return TICKET_BY_ID.get(ticket_id)
    except Ticket.DoesNotExist:
        raise TicketNotFound(f"no ticket {ticket_id}", ticket_id=ticket_id) from None


def pinned_state_by_ticket_id(ticket_id: str, *, figures_only: bool = False) -> PinnedState:
    """The pinned state with its ticket and its stored agent-facing state, not its items (one query), or
    TicketNotFound. `figures_only`: neither the items nor the stored state (the version and tokens)."""
    check_ticket_id(ticket_id)
    try:
        return (STATE_FIGURES_BY_TICKET_ID if figures_only else STATE_BY_TICKET_ID).get(ticket_id)
    except PinnedState.DoesNotExist:
        raise TicketNotFound(f"no ticket {ticket_id}", ticket_id=ticket_id) from None


def check_class_scope(token: AgentToken, ticket_class: TicketClass) -> None:
    """ClassNotAllowed unless the token may act on tickets of this class (an unscoped token may on all)."""
    if not token.allows_class(ticket_class.pk):
        raise ClassNotAllowed(
            f"this agent token is scoped to other ticket classes than {ticket_class.slug!r}",
            ticket_class=ticket_class.slug,
        )


def check_ticket_scope(token: AgentToken, ticket_id: str) -> None:
    """ClassNotAllowed unless the token may act on this ticket's class. An unknown ticket passes (the view
    answers 404); an unscoped token costs no query."""
    if token.class_scope() is None or len(ticket_id) > 64 or not storable_text(ticket_id):
        return
    found = (
        Ticket.objects.filter(ticket_id=ticket_id)
        .values_list("ticket_class_id", "ticket_class__slug")
        .first()
    )
    if found is not None and not token.allows_class(found[0]):
        raise ClassNotAllowed(
            f"this agent token may not act on ticket {ticket_id}: it is scoped to other ticket classes than "
            f"{found[1]!r}",
            ticket_id=ticket_id,
            ticket_class=found[1],
        )


def ticket_class_by_slug(slug: str) -> TicketClass | None:
    return TicketClass.objects.filter(slug=slug).first()


@dataclass(frozen=True)
class TicketDetail:
    ticket: Ticket
    state_version: int
    figures: ContextFigures
    compactions: CompactionTotals
    ledger: dict[str, int]

    def as_json(self) -> dict[str, object]:
        ticket = self.ticket
        return {
            "ticket_id": ticket.ticket_id,
            "order_id": ticket.order_id,
            "seller_type": ticket.seller_type,
            "ticket_class": ticket.ticket_class.slug,
            "status": ticket.status,
            "turn_count": ticket.turn_count,
            "state_version": self.state_version,
            "tokens": self.figures.tokens.as_json(),
            "token_budget": self.figures.token_budget,
            "threshold_tokens": self.figures.threshold_tokens,
            "first_active_turn": self.figures.first_active_turn,
            "state_over_threshold": RequestSize(
                system=self.figures.tokens.system, state=self.figures.tokens.state
            ).fills_threshold(self.figures.threshold_tokens),
            "compaction_totals": self.compactions.as_json(),
            "ledger": self.ledger,
            "created_at": ticket.created_at,
            "updated_at": ticket.updated_at,
        }


def ticket_detail(ticket_id: str) -> TicketDetail:
    """The ticket with its token figures, what compaction cost it and its ledger outcomes (five queries)."""
    pinned = pinned_state_by_ticket_id(ticket_id, figures_only=True)
    figures = context_figures(pinned.ticket, state_tokens=pinned.tokens)
    return TicketDetail(
        ticket=pinned.ticket,
        state_version=pinned.version,
        figures=figures,
        compactions=compaction_totals(pinned.ticket),
        ledger=ticket_ledger_counts(pinned.ticket),
    )


def ticket_context(ticket_id: str) -> AssembledContext:
    """The request an agent sends for its next turn: two queries (the ticket with its state and active
    summary, then the turns since), whatever the ticket's length."""
    check_ticket_id(ticket_id)
    try:
        ticket = CONTEXT_TICKET.get(ticket_id)
    except Ticket.DoesNotExist:
        raise TicketNotFound(f"no ticket {ticket_id}", ticket_id=ticket_id) from None
    return assemble_context(ticket)


def served_context(ticket_id: str) -> tuple[int, AssembledContext] | None:
    """The ticket's class id and its context, with the state as its served text, read as plain rows; None for
    no such ticket or no served text of its state's version. Two queries, as ticket_context."""
    if len(ticket_id) > 64 or not storable_text(ticket_id):
        return None
    return context_from_rows(ticket_id)


def ticket_compactions(ticket_id: str) -> QuerySet[CompactionEvent]:
    ticket = ticket_by_id(ticket_id)
    return CompactionEvent.objects.filter(ticket=ticket).order_by("number")


HISTORY_PAGE_SIZE = DEFAULT_PAGE_SIZE
HISTORY_MAX_PAGE_SIZE = MAX_PAGE_SIZE


def ticket_history(ticket_id: str, *, page: int, page_size: int) -> HistoryPage:
    """One page of the ticket's history, newest first (a constant number of queries)."""
    return _ticket_history(ticket_by_id(ticket_id), page=page, page_size=page_size)
