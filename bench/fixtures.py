"""The bench's fixtures: a scratch database flushed, then T-40118 imported once through the services and
copied row by row, the long tickets and the write pools inserted with bulk_create, states of 2,000 actions, the
agents' tickets, an agent token and a supervisor session for the load.

A large state is written as data (every action a copy of one recorded through the services, its id, item and key
its own), then one more action goes through the services, so whatever the desk keeps per version of the state is
written by the desk itself; `check_state` then reads it back through the API and refuses a fixture that does not
answer with every action.
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
from compaction.queue_figures import ticket_figures_refresh
from compaction.selectors import context_figures
from core.context import summary_message
from core.identity import action_keys
from core.state import ActionFigures, ActionItem
from core.state_text import action_texts
from core.tokens import STATE_PREFIX, compact_json, count_message, state_message
from core.vocabulary import CompactionStatus
from desk.demo import reference_ticket_path
from desk.importer import ImportTicket, import_ticket
from tickets.accounts import ROLES, create_agent, create_person
from tickets.models import PinnedState, StateAction, StateActionKey, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

Log = Callable[[str], None]

TURN_TEXT = (
    "Hi, it's me again about order SU-40118. The courier says the parasol was delivered yesterday but nothing "
    "arrived here, and the table still has that cracked corner. Can you check with the carrier and tell me "
    "what happens with the refund? I'd rather not wait another week."
)
POOL_SIZE = 32  # tickets per app and write endpoint, so 16 connections rarely wait on one ticket's lock
AGENTS = 16  # concurrent agents in the whole-turn case
TICKETS_PER_AGENT = (
    4  # each agent rotates over its own tickets, so a context does not grow by one ticket alone
)
BIG_STATE = 2000  # actions in the large states


@dataclass
class Fixtures:
    token: str
    session: str
    read_20: str = "B-READ-20"
    read_long: str = "B-READ-LONG"  # `long_turns` turns and BIG_STATE actions
    long_turns: int = 50_000
    state_1: str = "B-STATE-1"  # one action
    state_big: str = "B-STATE-2000"  # BIG_STATE actions
    turn_tickets: dict[str, list[str]] = field(default_factory=dict)
    action_tickets: dict[str, list[str]] = field(default_factory=dict)
    actions_0: list[str] = field(default_factory=list)
    actions_big: list[str] = field(default_factory=list)
    agent_tickets: dict[str, list[list[str]]] = field(default_factory=dict)  # app -> agent -> tickets


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
    # The state's actions and their keys point at the state, not the ticket.
    source_state, copy_state = (PinnedState.objects.get(ticket=t) for t in (source, copy))
    actions = list(StateAction.objects.filter(state=source_state))
    keys = list(StateActionKey.objects.filter(state=source_state))
    for action in actions:
        action.pk, action.state = None, copy_state
    for key in keys:
        key.pk, key.state = None, copy_state
    StateAction.objects.bulk_create(actions, batch_size=1000)
    StateActionKey.objects.bulk_create(keys, batch_size=1000)
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
    ticket_figures_refresh(tickets=Ticket.objects.filter(pk=ticket.pk))  # the queue's stored figures
    Ticket.objects.filter(pk=ticket.pk).update(turn_count=turns)
    ticket.refresh_from_db()
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=context_figures(ticket).total)
    return ticket


def grow_state(ticket: Ticket, actions: int) -> None:
    """`actions` actions in the ticket's pinned state: copies of one recorded through the services (rows of
    their own, as the desk keeps them), then the last one through the services too (so the desk writes what it
    keeps of the state at that version)."""
    record_action(
        ticket=ticket, tool="issue_refund", item="grow-0", amount_cents=100, idempotency_key="grow-0"
    )
    pinned = PinnedState.objects.get(ticket=ticket)
    template = pinned.action_rows.order_by("-number").first()
    assert template is not None
    figures = ActionFigures(pinned.action_figures)
    rows, keys = [], []
    for number in range(pinned.action_count + 1, actions):
        copy = dict(
            template.data, id=f"A{number}", item=f"grow-{number - 1}", idempotency_key=f"grow-{number - 1}"
        )
        stored = ActionItem.model_validate(copy).model_dump(
            mode="json"
        )  # in the model's key order, as written
        served, served_model = action_texts(stored)
        rows.append(
            StateAction(state=pinned, number=number, data=stored, served=served, served_model=served_model)
        )
        keys += [
            StateActionKey(state=pinned, number=number, key=key)
            for key in action_keys(stored["item"], stored.get("args"))
        ]
        figures.apply(None, stored)
    StateAction.objects.bulk_create(rows, batch_size=1000)
    StateActionKey.objects.bulk_create(keys, batch_size=1000)
    PinnedState.objects.filter(pk=pinned.pk).update(
        action_count=actions - 1, action_figures=figures.as_json(), version=pinned.version + 1
    )
    ticket.refresh_from_db()
    record_action(
        ticket=ticket,
        tool="issue_refund",
        item=f"grow-{actions - 1}",
        amount_cents=100,
        idempotency_key=f"grow-{actions - 1}",
    )


def check_state(token: str, ticket_id: str, actions: int) -> None:
    """The state GET answers with `actions` actions, or the fixture is refused (the bench would measure a lie)."""
    answer = Client(HTTP_AUTHORIZATION=f"Token {token}").get(f"/api/v1/tickets/{ticket_id}/state/")
    got = len(answer.json().get("actions_taken", [])) if answer.status_code == 200 else None
    if got != actions:
        raise RuntimeError(f"fixture {ticket_id}: the state GET answered {got} actions, not {actions}")


def build_fixtures(log: Log, long_turns: int = 50_000) -> tuple[Fixtures, dict[str, Any]]:
    _reset()
    token = create_agent(name="bench-agent")
    supervisor = create_person(username="bench-supervisor", password="bench-only-password", role="supervisor")
    client = Client()
    client.force_login(supervisor)
    fixtures = Fixtures(
        token=token, session=client.cookies[settings.SESSION_COOKIE_NAME].value, long_turns=long_turns
    )

    scenario = json.loads(reference_ticket_path().read_text())
    log(
        f"importing T-40118 (20 turns, through the services), a copy with {long_turns:,} turns and "
        f"{BIG_STATE:,} actions"
    )
    doc = dict(scenario, ticket_id=fixtures.read_20, turns=scenario["turns"][:20])
    import_ticket(ImportTicket.model_validate(doc))
    read_20 = Ticket.objects.get(ticket_id=fixtures.read_20)
    long = _long_ticket(read_20, fixtures.read_long, long_turns)
    grow_state(long, BIG_STATE)

    # Writes: a class whose threshold is never reached, so turn POSTs measure the not-due path.
    roomy = TicketClass.objects.create(
        slug="bench-roomy", token_budget=2_000_000_000, compaction_threshold=1.0
    )
    for app in ("d", "p", "r", "m"):
        fixtures.turn_tickets[app] = [f"B-TURN-{app}-{i}" for i in range(POOL_SIZE)]
        fixtures.action_tickets[app] = [f"B-ACT-{app}-{i}" for i in range(POOL_SIZE)]
    for app in ("d", "r"):
        fixtures.agent_tickets[app] = [
            [f"B-AGENT-{app}-{a}-{t}" for t in range(TICKETS_PER_AGENT)] for a in range(AGENTS)
        ]
    opened = [
        tid for ids in (*fixtures.turn_tickets.values(), *fixtures.action_tickets.values()) for tid in ids
    ]
    opened += [tid for agents in fixtures.agent_tickets.values() for mine in agents for tid in mine]
    fixtures.actions_0 = [f"B-A0-{i}" for i in range(4)]
    for tid in [*opened, *fixtures.actions_0]:
        open_ticket(ticket_id=tid, order_id="SU-B", seller_type="marketplace", ticket_class=roomy)

    log(f"states of 1 and {BIG_STATE:,} actions, and copies of the large one for the action POSTs")
    one = open_ticket(
        ticket_id=fixtures.state_1, order_id="SU-B", seller_type="marketplace", ticket_class=roomy
    )
    record_action(ticket=one, tool="issue_refund", item="only", amount_cents=100, idempotency_key="only")
    big = open_ticket(
        ticket_id=fixtures.state_big, order_id="SU-B", seller_type="marketplace", ticket_class=roomy
    )
    grow_state(big, BIG_STATE)
    fixtures.actions_big = [_clone_ticket(big, f"B-ABIG-{i}").ticket_id for i in range(4)]
    check_state(token, fixtures.state_1, 1)
    check_state(token, fixtures.state_big, BIG_STATE)
    check_state(token, fixtures.actions_big[-1], BIG_STATE)
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
