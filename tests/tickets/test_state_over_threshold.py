"""Ticket.state_over_threshold is stored and kept current by every writer of what it depends on: the pinned
state's tokens (state services), the class's budget and threshold (the class service). It always equals what
Ticket.objects.state_fills_threshold() computes from the stored counts."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from core.tokens import RequestSize
from tickets.models import PinnedState, Ticket, TicketClass
from tickets.services.actions import record_action
from tickets.services.classes import save_ticket_class
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def tiny() -> TicketClass:
    return TicketClass.objects.create(slug="tiny-512", token_budget=512, compaction_threshold=0.5)


def stored(ticket: Ticket) -> bool:
    return Ticket.objects.values_list("state_over_threshold", flat=True).get(pk=ticket.pk)


def computed(ticket: Ticket) -> bool:
    return Ticket.objects.state_fills_threshold().filter(pk=ticket.pk).exists()


def fill_state(ticket: Ticket) -> list[str]:
    """Open questions until the state alone reaches the class's threshold; their ids."""
    ids: list[str] = []
    while not computed(ticket):
        state = change_state(
            ticket=ticket, op="question_opened", text=f"Did the courier scan parcel {len(ids)} at the depot?"
        )
        ids.append(state.items.open_questions[-1].id)
    return ids


def test_the_flag_follows_the_state_both_ways(tiny: TicketClass) -> None:
    ticket = open_ticket(ticket_id="T-F1", order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
    assert stored(ticket) is False
    questions = fill_state(ticket)
    assert stored(ticket) is True and ticket.state_over_threshold is True  # the caller's copy follows
    pinned = PinnedState.objects.get(ticket=ticket)
    floor = RequestSize(system=ticket.system_prompt_tokens, state=pinned.tokens).floor
    assert floor >= tiny.threshold_tokens
    for qid in questions:
        change_state(ticket=ticket, op="question_resolved", text=qid)
    assert computed(ticket) is False and stored(ticket) is False


def test_an_action_that_fills_the_threshold_sets_it(tiny: TicketClass) -> None:
    ticket = open_ticket(ticket_id="T-F2", order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
    n = 0
    while not computed(ticket):
        record_action(
            ticket=ticket, tool="lookup_order", item=f"order {n}", reversible=True, idempotency_key=f"k{n}"
        )
        n += 1
    assert stored(ticket) is True


def test_a_class_change_recomputes_its_tickets_and_no_other(tiny: TicketClass) -> None:
    full = open_ticket(ticket_id="T-F3", order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
    roomy = open_ticket(ticket_id="T-F4", order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
    other_class = TicketClass.objects.create(slug="other-512", token_budget=512, compaction_threshold=0.5)
    elsewhere = open_ticket(
        ticket_id="T-F5", order_id="SU-1", seller_type="marketplace", ticket_class=other_class
    )
    fill_state(full)
    fill_state(elsewhere)
    tiny.token_budget = 100_000
    save_ticket_class(ticket_class=tiny, by=None)
    assert (stored(full), stored(roomy), stored(elsewhere)) == (False, False, True)
    tiny.token_budget = 512
    tiny.compaction_threshold = 0.1  # 51 tokens: the system prompt and empty state alone reach it
    save_ticket_class(ticket_class=tiny, by=None)
    assert (stored(full), stored(roomy)) == (computed(full), computed(roomy)) == (True, True)


def test_a_ticket_opened_on_a_class_its_empty_state_fills_is_flagged_at_once() -> None:
    small = TicketClass.objects.create(slug="small-64", token_budget=64, compaction_threshold=0.2)
    ticket = open_ticket(ticket_id="T-F6", order_id="SU-1", seller_type="marketplace", ticket_class=small)
    assert stored(ticket) is True and computed(ticket) is True


def test_the_migration_fills_the_flag_from_the_stored_counts(tiny: TicketClass) -> None:
    full = open_ticket(ticket_id="T-F7", order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
    roomy = open_ticket(ticket_id="T-F8", order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
    fill_state(full)
    Ticket.objects.update(state_over_threshold=False)  # as the column is added
    migration = importlib.import_module("tickets.migrations.0013_state_over_threshold_flag")
    migration.fill(apps, None)
    assert (stored(full), stored(roomy)) == (True, False)


def test_the_sql_twin_equals_request_size_fills_threshold_on_each_side_of_the_threshold(
    tiny: TicketClass,
) -> None:
    """state_fills_threshold() (SQL, for the queue) and RequestSize.fills_threshold (Python) are one rule:
    walked question by question across the threshold, with the floor exactly at it included."""
    ticket = open_ticket(ticket_id="T-TWIN", order_id="SU-1", seller_type="marketplace", ticket_class=tiny)
    seen = set()
    for step in range(40):
        pinned = PinnedState.objects.get(ticket=ticket)
        size = RequestSize(system=ticket.system_prompt_tokens, state=pinned.tokens)
        expected = size.fills_threshold(tiny.threshold_tokens)
        assert computed(ticket) is expected, (step, size.floor, tiny.threshold_tokens)
        # The boundary itself: a threshold equal to the floor fills it, one token more does not.
        assert size.fills_threshold(size.floor) and not size.fills_threshold(size.floor + 1)
        seen.add(expected)
        if expected:
            break
        change_state(ticket=ticket, op="question_opened", text=f"Was parcel {step} scanned at the depot?")
    assert seen == {False, True}
