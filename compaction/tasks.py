from __future__ import annotations

from django.tasks import task

from compaction.services import compact_ticket
from tickets.models import Ticket


@task()
def compact_ticket_task(*, ticket_pk: int, at_turn: int) -> dict[str, object]:
    """Compact a ticket after `at_turn`. Safe to run twice: a turn compacts at most once."""
    ticket = Ticket.objects.get(pk=ticket_pk)
    event = compact_ticket(ticket=ticket, at_turn=at_turn)
    if event is None:
        return {"status": "not_due"}
    return {"status": event.status, "number": event.number}
