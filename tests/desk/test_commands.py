from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from desk.pages.metrics import compaction_metrics
from desk.pages.queue import QueueFilters, QueueFlag, queue_tickets
from tests.fake_openai import Reply
from tickets.accounts import AGENT, authenticate_agent_token, has_role
from tickets.models import AgentToken, Ticket

pytestmark = pytest.mark.django_db


def test_create_agent_prints_its_token_as_the_last_line() -> None:
    out = StringIO()
    call_command("create_agent", "bot-1", stdout=out)
    last = out.getvalue().strip().splitlines()[-1]
    token = authenticate_agent_token(key=last)
    assert token is not None and token.user.username == "bot-1"
    assert has_role(token.user, AGENT)
    assert not token.user.has_usable_password()  # agents cannot log in to the pages
    stored = AgentToken.objects.get(user=token.user)
    assert last not in (stored.prefix, stored.digest) and stored.digest != last  # only a digest is kept


def test_create_agent_refuses_an_existing_name() -> None:
    User.objects.create_user("bot-1")
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_agent", "bot-1", stdout=StringIO())


def test_load_demo_loads_t40118_and_generated_tickets_and_can_run_again() -> None:
    out = StringIO()
    call_command("load_demo", "--tickets", "5", stdout=out)
    assert Ticket.objects.filter(ticket_id="T-40118").exists()
    assert Ticket.objects.count() == 6
    assert Ticket.objects.get(ticket_id="T-50004").status == "resolved"  # a spread of statuses for the queue
    assert User.objects.filter(username="supervisor", groups__name="supervisor").exists()
    assert "demo agent API token" in out.getvalue()
    call_command("load_demo", "--tickets", "5", stdout=StringIO())
    assert Ticket.objects.count() == 6
    assert Ticket.objects.filter(compactions__status="applied").distinct().count() >= 1


def test_load_demo_keeps_the_demo_token_across_runs(settings: Any) -> None:
    """`make run` loads the demo each time: the token a user exported an hour ago keeps working."""
    first, second = StringIO(), StringIO()
    call_command("load_demo", "--tickets", "0", stdout=first)
    call_command("load_demo", "--tickets", "0", stdout=second)
    token = first.getvalue().strip().rsplit(" ", 1)[-1]
    assert second.getvalue().strip().rsplit(" ", 1)[-1] == token
    assert "unchanged" in second.getvalue()
    assert authenticate_agent_token(key=token) is not None
    Path(settings.SUNDRY_DEMO_TOKEN_FILE).unlink()  # lost: a new one, and it says so
    third = StringIO()
    call_command("load_demo", "--tickets", "0", stdout=third)
    assert "NEW" in third.getvalue() and authenticate_agent_token(key=token) is None


def test_load_demo_refuses_to_run_in_production(settings: Any) -> None:
    settings.PRODUCTION = True
    with pytest.raises(CommandError, match="production"):
        call_command("load_demo", "--tickets", "0", stdout=StringIO())
    assert not User.objects.filter(username__in=["admin", "supervisor"]).exists()


def test_the_demo_tells_the_seeds_story() -> None:
    """T-40118 is compacted by the seed's lossy summary: the refund is missing, the queue flags it and
    the metrics count it."""
    call_command("load_demo", "--tickets", "0", stdout=StringIO())
    event = Ticket.objects.get(ticket_id="T-40118").compactions.get(status="applied")
    assert (event.summarizer_backend, event.summarizer_model) == ("scripted", "seed-lossy-t40118")
    assert "A1" in {m["id"] for m in event.coverage["missing"]}
    assert [t.ticket_id for t in queue_tickets(QueueFilters(flags=(QueueFlag.COVERAGE_MISS,)))] == ["T-40118"]
    assert {m.slug: m.coverage_misses for m in compaction_metrics()}["seed-8k"] == 1


def test_load_demo_keeps_t40118s_refused_second_refund_at_turn_26() -> None:
    from tickets.models import RefusedAttempt

    call_command("load_demo", "--tickets", "0", stdout=StringIO())
    attempt = RefusedAttempt.objects.get(ticket__ticket_id="T-40118")
    assert (attempt.tool, attempt.item, attempt.amount_cents, attempt.at_turn) == (
        "issue_refund",
        "garden-table",
        4000,
        26,
    )
    assert attempt.earlier_action_id == "A1" and "at turn 6" in attempt.message
    assert list(Ticket.objects.with_refused_attempts().values_list("ticket_id", flat=True)) == ["T-40118"]
    state = Ticket.objects.get(ticket_id="T-40118").pinned_state
    assert state.items.refunded_cents_total == 4000


def test_the_demo_switch_has_the_openai_summarizer_compact_t40118(
    settings: Any, openai_server: Any, scenario: dict
) -> None:
    """SUNDRY_DEMO_SUMMARIZER=openai: T-40118 goes on a 4,000-token class whose summaries the
    OpenAI-compatible server writes (here a loopback one replaying the seed's lossy summary); the refund it
    drops is flagged on the event, as the review page shows it."""
    import json

    from compaction.models import CompactionEvent

    settings.SUNDRY_DEMO_SUMMARIZER = "openai"
    settings.SUNDRY_DEMO_SUMMARIZER_MODEL = "small-local"
    lossy = json.dumps(scenario["lossy_summary_turns_1_14"])
    with openai_server([Reply(content=lossy)]) as fake:
        call_command("load_demo", "--tickets", "0", stdout=StringIO())
    ticket = Ticket.objects.select_related("ticket_class").get(ticket_id="T-40118")
    assert (ticket.ticket_class.slug, ticket.ticket_class.token_budget) == ("seed-model-4k", 4000)
    assert ticket.ticket_class.summarizer_backend == "openai"
    assert fake.requests and {r["body"]["model"] for r in fake.requests} == {"small-local"}
    # On 4,000 tokens the tool results cross the budget before a boundary: the hard ceiling compacts.
    event = CompactionEvent.objects.filter(ticket=ticket, status__in=("applied", "forced")).first()
    assert event is not None and event.summarizer_input_tokens == 900  # the server's usage, recorded
    assert event.coverage_missing_count >= 1
