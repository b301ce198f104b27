"""Small builders shared by the tests: the named users (sam the supervisor, ada the admin, agent-7) and
small tickets. tests/conftest.py gives every test `sam`, a client logged in as the supervisor."""

from __future__ import annotations

import copy
from typing import Any

from django.contrib.auth.models import Group, User

from desk.importer import ImportTicket, import_ticket
from desk.turns import receive_turn
from tickets.accounts import ADMIN, AGENT, SUPERVISOR, create_agent, create_person
from tickets.models import Ticket, TicketClass

PASSWORD = "desk-test-password"


def ensure_roles() -> None:
    """The role groups (a data migration makes them; a flushed transactional test database lacks them)."""
    for name in (AGENT, SUPERVISOR, ADMIN):
        Group.objects.get_or_create(name=name)


def supervisor(username: str = "sam") -> User:
    ensure_roles()
    return create_person(username=username, password=PASSWORD, role=SUPERVISOR)


def admin(username: str = "ada") -> User:
    ensure_roles()
    return create_person(username=username, password=PASSWORD, role=ADMIN)


def agent(name: str = "agent-7") -> User:
    ensure_roles()
    create_agent(name=name)
    return User.objects.get(username=name)


def add_turns(ticket: Ticket, *turns: dict[str, Any]) -> None:
    for turn in turns:
        receive_turn(ticket=ticket, **turn)


def chat(ticket: Ticket, count: int) -> None:
    """`count` short customer/agent exchanges (agent turns are reply_sent boundaries)."""
    for i in range(count):
        role = "customer" if i % 2 == 0 else "agent"
        receive_turn(
            ticket=ticket,
            role=role,
            content=f"message {i}",
            boundary="reply_sent" if role == "agent" else "",
        )


def import_t40118(
    scenario: dict[str, Any], *, backend: str = "extractive", until: int | None = None
) -> Ticket:
    """Import the reference ticket (its first `until` turns) on a standard-8k class with the given summarizer.

    An existing standard-8k class is used as it is, as the importer does.
    """
    TicketClass.objects.get_or_create(
        slug="standard-8k",
        defaults={
            "token_budget": 8000,
            "compaction_threshold": 0.8,
            "summarizer_backend": backend,
            "summarizer_model": "cheap-summarizer",
        },
    )
    doc = copy.deepcopy(scenario)
    if until is not None:
        doc["turns"] = doc["turns"][:until]
    import_ticket(ImportTicket.model_validate(doc))
    return Ticket.objects.get(ticket_id=scenario["ticket_id"])


def long_ticket(
    ticket_id: str,
    turns: int,
    *,
    compact_every: int = 50,
    ticket_class: TicketClass | None = None,
) -> Ticket:
    """A ticket with `turns` turns written straight to the database (bulk_create, as bench/fixtures.py's
    `_long_ticket` does), not through the services: thousands of turns in a fraction of a second.

    Turn n says `turn-n says hello`; its stored context grows by 100 tokens a turn, and every
    `compact_every` turns an applied compaction replaces the turns since the last one and brings the
    context back down, so the chart's sawtooth crosses the threshold before each drop.
    """
    from compaction.models import CompactionEvent
    from compaction.queue_figures import ticket_figures_refresh
    from core.vocabulary import CompactionStatus
    from tickets.models import Turn
    from tickets.services.lifecycle import open_ticket

    ticket_class = (
        ticket_class
        or TicketClass.objects.get_or_create(
            slug="long-8k", defaults={"token_budget": 8000, "compaction_threshold": 0.8}
        )[0]
    )
    budget, threshold = ticket_class.token_budget, ticket_class.threshold_tokens
    ticket = open_ticket(
        ticket_id=ticket_id, order_id=f"SU-{ticket_id}", seller_type="marketplace", ticket_class=ticket_class
    )
    base = threshold // 4
    step = (threshold - base) * 1.1 / compact_every  # the turn before a compaction is over the threshold
    rows: list[Turn] = []
    events: list[CompactionEvent] = []
    for n in range(1, turns + 1):
        since = (n - 1) % compact_every + 1
        rows.append(
            Turn(
                ticket=ticket,
                number=n,
                role="customer" if n % 2 else "agent",
                content=f"turn-{n} says hello",
                boundary="" if n % 2 else "reply_sent",
                tokens=12,
                context_tokens=round(base + step * since),
                token_budget=budget,
                threshold_tokens=threshold,
            )
        )
        if since == compact_every:
            events.append(
                CompactionEvent(
                    ticket=ticket,
                    number=len(events) + 1,
                    at_turn=n,
                    status=CompactionStatus.APPLIED,
                    first_replaced_turn=n - compact_every + 1,
                    last_replaced_turn=n - 1,
                    tokens_before=rows[-1].context_tokens,
                    tokens_after=base,
                    threshold_tokens=threshold,
                    token_budget=budget,
                    attempts=1,
                    summarizer_backend="extractive",
                    summary_tokens=40,
                )
            )
    Turn.objects.bulk_create(rows, batch_size=1000)
    CompactionEvent.objects.bulk_create(events, batch_size=1000)
    Ticket.objects.filter(pk=ticket.pk).update(turn_count=turns, context_tokens=rows[-1].context_tokens)
    # The queue's stored figures of those events, as the compaction services would have kept them.
    ticket_figures_refresh(tickets=Ticket.objects.filter(pk=ticket.pk))
    return Ticket.objects.get(pk=ticket.pk)
