"""The bench's fixtures: a scratch database flushed, then T-40118 imported once through the services and
copied row by row, the long tickets and the write pools inserted with bulk_create, an agent token and a
supervisor session for the load.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from compaction.models import CompactionEvent
from compaction.selectors import context_figures
from core.context import summary_message
from core.tokens import STATE_PREFIX, compact_json, count_message, state_message
from core.vocabulary import CompactionStatus
from desk.demo import reference_ticket_path
from desk.importer import ImportTicket, import_ticket
from tickets.accounts import ROLES, create_agent, create_person
from tickets.models import PinnedState, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

Log = Callable[[str], None]

TURN_TEXT = (
    "Hi, it's me again about order SU-40118. The courier says the parasol was delivered yesterday but nothing "
    "arrived here, and the table still has that cracked corner. Can you check with the carrier and tell me "
    "what happens with the refund? I'd rather not wait another week."
)
POOL_SIZE = 32  # tickets per app and write endpoint, so 16 connections rarely wait on one ticket's lock


@dataclass
class Fixtures:
    token: str
    session: str
    read_20: str = "B-READ-20"
    read_5000: str = "B-READ-5000"
    turn_tickets: dict[str, list[str]] = field(default_factory=dict)
    action_tickets: dict[str, list[str]] = field(default_factory=dict)
    actions_0: list[str] = field(default_factory=list)
    actions_300: list[str] = field(default_factory=list)


def _reset() -> None:
    call_command("flush", interactive=False, verbosity=0)
    for name in ROLES:
        Group.objects.get_or_create(name=name)


def _clone_ticket(source: Ticket, ticket_id: str) -> Ticket:
    """A copy of a ticket with every row that points at it (turns, state, audit, events, keys...)."""
    copy = Ticket.objects.get(pk=source.pk)
    copy.pk = None
    copy.ticket_id = ticket_id
    copy.save()
    for relation in Ticket._meta.related_objects:
        if not (relation.one_to_many or relation.one_to_one):
            continue
        model = relation.related_model
        name = relation.field.name
        rows = list(model._default_manager.filter(**{name: source}))  # type: ignore[union-attr]
        for row in rows:
            row.pk = None
            setattr(row, name, copy)
        model._default_manager.bulk_create(rows)  # type: ignore[union-attr]
    return copy


def _long_ticket(source: Ticket, ticket_id: str, turns: int) -> Ticket:
    """`turns` turns of history behind the source's window: applied compactions every 7 turns, then the
    source's own turns as the active window (so its context has the same turns, plus a summary)."""
    window = list(Turn.objects.filter(ticket=source).order_by("number"))
    history = turns - len(window)
    ticket = _clone_ticket(source, ticket_id)
    Turn.objects.filter(ticket=ticket).delete()
    CompactionEvent.objects.filter(ticket=ticket).delete()

    def copied(turn: Turn, number: int) -> Turn:
        return Turn(
            ticket=ticket,
            number=number,
            role=turn.role,
            content=turn.content,
            tool=turn.tool,
            args=turn.args,
            tool_call_id=turn.tool_call_id,
            boundary=turn.boundary,
            tokens=turn.tokens,
            context_tokens=turn.context_tokens,
            token_budget=turn.token_budget,
            threshold_tokens=turn.threshold_tokens,
        )

    rows = [copied(window[i % len(window)], i + 1) for i in range(history)]
    rows += [copied(turn, history + i + 1) for i, turn in enumerate(window)]
    Turn.objects.bulk_create(rows, batch_size=1000)
    state = PinnedState.objects.get(ticket=ticket).agent_json()
    summary = {
        "decisions": [d["text"] for d in state["decisions"]],
        "actions_taken": [
            f"{a['tool']} {a['amount_cents']} cents {a['item']}" for a in state["actions_taken"]
        ],
        "customer_constraints": [c["text"] for c in state["customer_constraints"]],
        "open_questions": [q["text"] for q in state["open_questions"]],
        "narrative": "The buyer reported damage; refunds and carrier checks followed over many turns.",
    }
    summary_tokens = count_message(summary_message(summary))
    ticket_class = ticket.ticket_class
    bounds = [(first, min(first + 6, history)) for first in range(1, history + 1, 7)]
    events = [
        CompactionEvent(
            ticket=ticket,
            number=n + 1,
            at_turn=min(last + 2, turns),
            status=CompactionStatus.APPLIED,
            first_replaced_turn=first,
            last_replaced_turn=last,
            tokens_before=ticket_class.threshold_tokens + 100,
            tokens_after=ticket_class.threshold_tokens // 3,
            threshold_tokens=ticket_class.threshold_tokens,
            token_budget=ticket_class.token_budget,
            attempts=1,
            summarizer_backend="extractive",
            summarizer_model="extractive-v1",
            summary=summary,
            summary_tokens=summary_tokens,
            coverage={"covered": [], "missing": []},
        )
        for n, (first, last) in enumerate(bounds)
    ]
    # One event per at_turn: the last two bounds may share one when the history is not a multiple of 7.
    unique: dict[int, CompactionEvent] = {}
    for event in events:
        unique.setdefault(event.at_turn, event)
    for n, event in enumerate(unique.values(), start=1):
        event.number = n
    CompactionEvent.objects.bulk_create(unique.values(), batch_size=1000)
    Ticket.objects.filter(pk=ticket.pk).update(turn_count=turns)
    ticket.refresh_from_db()
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=context_figures(ticket).total)
    return ticket


def build_fixtures(log: Log) -> tuple[Fixtures, dict[str, Any]]:
    _reset()
    token = create_agent(name="bench-agent")
    supervisor = create_person(username="bench-supervisor", password="bench-only-password", role="supervisor")
    client = Client()
    client.force_login(supervisor)
    fixtures = Fixtures(token=token, session=client.cookies[settings.SESSION_COOKIE_NAME].value)

    scenario = json.loads(reference_ticket_path().read_text())
    log("importing T-40118 (20 turns, through the services) and building a 5,000-turn copy")
    doc = dict(scenario, ticket_id=fixtures.read_20, turns=scenario["turns"][:20])
    import_ticket(ImportTicket.model_validate(doc))
    read_20 = Ticket.objects.get(ticket_id=fixtures.read_20)
    _long_ticket(read_20, fixtures.read_5000, 5000)

    # Writes: a class whose threshold is never reached, so turn POSTs measure the not-due path.
    roomy = TicketClass.objects.create(
        slug="bench-roomy", token_budget=2_000_000_000, compaction_threshold=1.0
    )
    for app in ("d", "p", "r", "m"):
        fixtures.turn_tickets[app] = [f"B-TURN-{app}-{i}" for i in range(POOL_SIZE)]
        fixtures.action_tickets[app] = [f"B-ACT-{app}-{i}" for i in range(POOL_SIZE)]
    opened = [
        tid for ids in (*fixtures.turn_tickets.values(), *fixtures.action_tickets.values()) for tid in ids
    ]
    fixtures.actions_0 = [f"B-A0-{i}" for i in range(4)]
    for tid in [*opened, *fixtures.actions_0]:
        open_ticket(ticket_id=tid, order_id="SU-B", seller_type="marketplace", ticket_class=roomy)

    log("recording 300 actions through the services on one ticket, then copying it")
    source = open_ticket(ticket_id="B-A300-0", order_id="SU-B", seller_type="marketplace", ticket_class=roomy)
    for i in range(300):
        record_action(
            ticket=source, tool="issue_refund", item=f"item-{i}", amount_cents=100, idempotency_key=f"k{i}"
        )
    fixtures.actions_300 = ["B-A300-0"] + [
        _clone_ticket(source, f"B-A300-{i}").ticket_id for i in range(1, 4)
    ]
    return fixtures, {"t40118": _state_token_savings(scenario)}


def _state_token_savings(scenario: dict[str, Any]) -> dict[str, int]:
    """Tokens of T-40118's pinned state as stored (every field) and as the agent gets it, per turn."""
    doc = dict(scenario, ticket_id="B-T40118-FULL")
    import_ticket(ImportTicket.model_validate(doc))
    pinned = PinnedState.objects.select_related("ticket").get(ticket__ticket_id="B-T40118-FULL")
    agent = pinned.agent_json()
    full = dict(agent, actions_taken=[a.model_dump(mode="json") for a in pinned.items.actions_taken])
    full_tokens = count_message(STATE_PREFIX + compact_json(full))  # every field, as the desk sent it before
    agent_tokens = count_message(state_message(agent))  # what the context sends now
    return {
        "full_state_tokens": full_tokens,
        "agent_state_tokens": agent_tokens,
        "saved_per_turn": full_tokens - agent_tokens,
    }
