"""A turn arriving (desk.turns.receive_turn): a turn that stays under the threshold is one statement of its own
on PostgreSQL; any other takes the transaction, and the policy decides it there."""

from __future__ import annotations

import pytest
from django.db import transaction

from compaction.models import CompactionEvent
from compaction.services import not_due_up_to
from core.policy import is_due
from core.vocabulary import CompactionStatus
from desk.turns import receive_turn
from tickets.models import Ticket, TicketClass, Turn
from tickets.services.lifecycle import open_ticket

SENTENCE = "The parcel has still not arrived and the tracking page shows nothing new since Monday. "


def small_ticket() -> Ticket:
    klass, _ = TicketClass.objects.get_or_create(
        slug="small-1k", defaults={"token_budget": 1000, "compaction_threshold": 0.5}
    )
    return open_ticket(ticket_id="T-TU", order_id="SU-1", seller_type="marketplace", ticket_class=klass)


def test_the_ceiling_is_the_last_size_at_which_the_policy_is_not_due() -> None:
    for budget, share in ((1000, 0.5), (8000, 0.8), (333, 0.7)):
        klass = TicketClass(slug="x", token_budget=budget, compaction_threshold=share)
        ceiling = not_due_up_to(klass)
        assert not is_due(ceiling, klass.threshold_tokens) and is_due(ceiling + 1, klass.threshold_tokens)


@pytest.mark.django_db
def test_a_turn_past_the_threshold_on_a_stale_read_of_the_ticket_is_still_decided_by_the_policy() -> None:
    """The caller's ticket says the turn stays under the threshold, the row says otherwise: the statement that
    would append it on its own writes nothing, and the turn goes through the transaction and the policy."""
    ticket = small_ticket()
    stale = Ticket.objects.get(
        pk=ticket.pk
    )  # read before the other turns: its context size is the opening one
    threshold = not_due_up_to(ticket.ticket_class)
    while True:
        received = receive_turn(ticket=ticket, role="customer", content=SENTENCE)
        assert received.compaction.status == "not_due"
        if received.context_tokens + received.turn.tokens > threshold:  # the next such turn passes it
            break
    answer = receive_turn(ticket=stale, role="customer", content=SENTENCE)
    assert answer.context_tokens > threshold
    assert answer.compaction.status == "deferred"  # due with no boundary: the policy's answer, not not_due
    event = CompactionEvent.objects.get(ticket=ticket)
    assert (event.status, event.at_turn) == (CompactionStatus.DEFERRED, answer.turn.number)
    assert answer.turn.number == Turn.objects.filter(ticket=ticket).count() == received.turn.number + 1
    fresh = Ticket.objects.get(pk=ticket.pk)
    assert (fresh.turn_count, fresh.context_tokens) == (answer.turn.number, answer.context_tokens)


@pytest.mark.django_db(transaction=True)
def test_a_turn_inside_a_callers_transaction_is_refused_and_writes_nothing() -> None:
    """No caller may hold the turn's locks: the single statement is not sent inside another transaction either."""
    ticket = small_ticket()
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        receive_turn(ticket=ticket, role="customer", content=SENTENCE)
    assert not Turn.objects.filter(ticket=ticket).exists()
    assert Ticket.objects.get(pk=ticket.pk).turn_count == 0
