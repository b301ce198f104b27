"""Opening a ticket and moving it between statuses."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from core.errors import InvalidInput
from core.state import StateItems, agent_state, items_to_data
from core.tokens import RequestSize, count_message, state_tokens
from core.vocabulary import StateOp
from tickets.errors import TicketAlreadyExists
from tickets.models import PinnedState, StateChange, Ticket, TicketClass, TicketStatus, TicketStatusChange
from tickets.served_state import served_columns
from tickets.services.actors import SYSTEM, Actor


@transaction.atomic
def open_ticket(
    *,
    ticket_id: str,
    order_id: str,
    seller_type: str,
    ticket_class: TicketClass,
    system_prompt: str | None = None,
    by: Actor = SYSTEM,
) -> Ticket:
    ticket_id = ticket_id.strip()
    if not ticket_id:
        raise InvalidInput("ticket_id must not be empty", field="ticket_id")
    if Ticket.objects.filter(ticket_id=ticket_id).exists():
        raise TicketAlreadyExists(f"ticket {ticket_id} already exists", ticket_id=ticket_id)
    prompt = system_prompt if system_prompt is not None else ticket_class.system_prompt
    items = StateItems()
    state_json = agent_state(
        ticket=ticket_id, order=order_id, seller_type=seller_type, version=1, items=items
    )
    opened_tokens = state_tokens(state_json, ticket_class.encoding)
    prompt_tokens = count_message(prompt, ticket_class.encoding)
    opened = RequestSize(system=prompt_tokens, state=opened_tokens)
    try:
        with transaction.atomic():
            ticket = Ticket.objects.create(
                ticket_id=ticket_id,
                order_id=order_id,
                seller_type=seller_type,
                ticket_class=ticket_class,
                system_prompt=prompt,
                system_prompt_tokens=prompt_tokens,
                # No turns and no summary yet: the request is the system prompt and the state.
                context_tokens=opened.total,
                state_over_threshold=opened.fills_threshold(ticket_class.threshold_tokens),
            )
    except IntegrityError:
        raise TicketAlreadyExists(f"ticket {ticket_id} already exists", ticket_id=ticket_id) from None
    PinnedState.objects.create(
        ticket=ticket,
        version=1,
        data=items_to_data(items),
        **served_columns(state_json),
        tokens=opened_tokens,
    )
    StateChange.objects.create(
        ticket=ticket,
        op=StateOp.OPENED,
        actor_kind=by.kind,
        actor=by.user,
        from_version=0,
        to_version=1,
        after_tokens=opened_tokens,
        thread_turn=0,
    )
    return ticket


@transaction.atomic
def set_ticket_status(*, ticket: Ticket, status: str, by: Actor, reason: str = "") -> Ticket:
    """Move a ticket between open, waiting, resolved and escalated, audited with who, from, to and why.

    The thread and its state stay as they are. Setting the status it already has changes nothing.
    """
    if status not in TicketStatus.values:
        raise InvalidInput(
            f"status {status!r} is not one of {', '.join(TicketStatus.values)}", field="status"
        )
    locked = Ticket.objects.select_for_update().get(pk=ticket.pk)
    if locked.status != status:
        TicketStatusChange.objects.create(
            ticket=locked,
            actor_kind=by.kind,
            actor=by.user,
            from_status=locked.status,
            to_status=status,
            reason=(reason or "").strip(),
        )
        locked.status = status
        locked.save(update_fields=["status", "updated_at"])
    ticket.status = locked.status
    return locked
