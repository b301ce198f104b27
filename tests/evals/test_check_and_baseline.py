"""`compaction_eval --check` fails for each reason it names; the summary-only baseline; money per domain."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from core.context import SUMMARY_PREFIX, summary_message
from core.tokens import STATE_PREFIX
from evals.baseline import baseline_messages, rolling_summary
from evals.facts import Fact, FactCheck
from evals.results import EvalOptions, EventFigures, TicketResult
from evals.runner import evaluate
from evals.sources import load
from tests.fake_openai import Reply

pytestmark = pytest.mark.django_db

REPO = Path(settings.BASE_DIR)
FIXTURES = REPO / "evals" / "fixtures" / "tau"
E05 = REPO / "demo" / "evalset" / "E05-two-refunds-different-items.json"


def tau_fixtures() -> list[tuple[str, Any]]:
    return [(str(path), doc) for path in sorted(FIXTURES.glob("*.json")) for doc in load(path)[1]]


def passing_result(**changes: Any) -> TicketResult:
    result = TicketResult(ticket_id="T-1", source="f.json", domain="sundry-ticket", budget=2000)
    for name, value in changes.items():
        setattr(result, name, value)
    return result


def test_a_clean_result_has_no_problems() -> None:
    assert passing_result(tokens_context=1500, ended_over_budget=False, safe_cut_at_end=True).problems() == []


def test_check_fails_when_an_applied_compaction_did_not_shrink_the_request() -> None:
    same = EventFigures(number=2, status="applied", at_turn=9, tokens_before=1800, tokens_after=1800)
    bigger = EventFigures(number=3, status="forced", at_turn=12, tokens_before=2100, tokens_after=2150)
    shrank = EventFigures(number=1, status="applied", at_turn=5, tokens_before=1700, tokens_after=900)
    failed = EventFigures(number=4, status="failed", at_turn=14, tokens_before=1800, tokens_after=None)
    result = passing_result(events=[shrank, same, bigger, failed])
    assert result.problems() == [
        "compaction 2 (applied) did not shrink the request: 1800 -> 1800 tokens",
        "compaction 3 (forced) did not shrink the request: 2100 -> 2150 tokens",
    ]


def test_check_fails_when_a_fact_is_lost_from_the_pinned_state() -> None:
    refund = Fact(
        "actions_taken", stored_at=3, at_turn=3, tool="issue_refund", item="garden-table", amount_cents=4000
    )
    lost = FactCheck(fact=refund, state=False, summary=None, context=True)
    result = passing_result(facts=[lost])
    assert result.problems() == [
        "lost from the pinned state: actions_taken 'issue_refund 4000 cents garden-table at turn 3'"
    ]
    assert not result.ok


def test_check_fails_when_a_context_ends_over_budget_with_a_safe_cut_but_not_without_one() -> None:
    stuck = passing_result(tokens_context=2300, ended_over_budget=True, safe_cut_at_end=True)
    assert stuck.problems() == [
        "ended at 2300 tokens, over its 2000-token budget, although a safe cut existed"
    ]
    no_cut = passing_result(tokens_context=2300, ended_over_budget=True, safe_cut_at_end=False)
    assert no_cut.problems() == []  # every turn belongs to an unfinished tool exchange: nothing could be cut


def test_check_fails_when_the_pinned_money_differs_from_the_independent_figure() -> None:
    result = passing_result(
        money_state={"refunded_cents_total": 0, "charged_cents_total": 0, "credited_cents_total": 200},
        money_independent={
            "refunded_cents_total": 4000,
            "charged_cents_total": 500,
            "credited_cents_total": 200,
        },
        money_source="the replay",
    )
    assert result.problems() == [
        "refunded_cents_total: 4000 cents by the replay, 0 in the pinned state",
        "charged_cents_total: 500 cents by the replay, 0 in the pinned state",
    ]


def test_money_without_an_independent_figure_is_reported_unchecked_not_failed() -> None:
    result = passing_result(
        money_state={"refunded_cents_total": 0, "charged_cents_total": 955, "credited_cents_total": 0},
        money_independent=None,
    )
    assert result.problems() == []


def test_command_exits_1_naming_the_ticket_that_ended_over_budget_when_every_summary_fails(
    openai_server: Any,
) -> None:
    """A summarizer that always fails: compactions fail, the ticket ends over its budget with safe cuts left."""
    with openai_server([Reply(status=500)]), pytest.raises(CommandError) as raised:
        call_command(
            "compaction_eval",
            str(E05),
            "--summarizer=openai",
            "--budget=900",
            "--check",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    message = str(raised.value)
    assert message.startswith("--check failed")
    assert "E05-two-refunds-different-items: ended at" in message and "although a safe cut existed" in message


def test_command_check_passes_on_the_tau_fixtures() -> None:
    stdout = io.StringIO()
    call_command("compaction_eval", str(FIXTURES), "--check", stdout=stdout, stderr=io.StringIO())
    assert "OK: nothing over budget with a safe cut" in stdout.getvalue()


# --- the summary-only baseline ---


def test_the_rolling_summary_folds_the_previous_one_and_keeps_the_newest_part_that_fits() -> None:
    turns = [
        {
            "number": 4,
            "role": "customer",
            "content": "The table arrived cracked. I want my money back.",
            "tool": "",
            "args": None,
        },
        {
            "number": 5,
            "role": "tool_call",
            "content": "",
            "tool": "issue_refund",
            "args": {"item": "garden-table"},
        },
        {"number": 6, "role": "tool_result", "content": "", "tool": "issue_refund", "args": None},
        {
            "number": 7,
            "role": "agent",
            "content": "Refunded $40 for the table. Anything else?",
            "tool": "",
            "args": None,
        },
    ]
    text = rolling_summary("Customer (turn 1): Hello.", turns, room_chars=10_000)
    assert text.startswith("Customer (turn 1): Hello. Customer (turn 4): The table arrived cracked.")
    assert 'Agent called issue_refund({"item": "garden-table"}) (turn 5).' in text
    assert "issue_refund returned: (empty)" in text  # an empty tool result is still a turn
    assert text.endswith("Agent (turn 7): Refunded $40 for the table.")
    short = rolling_summary("Customer (turn 1): Hello.", turns, room_chars=60)
    assert len(short) == 60 and short.startswith("…") and short.endswith("Refunded $40 for the table.")
    assert "Hello" not in short  # the oldest part falls off, as in a rolling summary


def test_the_baseline_request_has_no_pinned_state_and_its_own_summary() -> None:
    messages = [
        {"role": "system", "content": "policy"},
        {"role": "system", "content": STATE_PREFIX + '{"actions_taken": []}'},
        {"role": "system", "content": summary_message({"narrative": "desk summary"})},
        {"role": "customer", "content": "hi", "turn": 9},
    ]
    out = baseline_messages(messages, "rolling text")
    assert [m["content"][:20] for m in out] == ["policy", SUMMARY_PREFIX[:20], "hi"]
    assert '"narrative":"rolling text"' in out[1]["content"]
    assert baseline_messages(messages, None) == [messages[0], messages[3]]


def test_the_baseline_is_measured_fact_by_fact_against_the_same_transcripts() -> None:
    """What the pinned state saves: facts the state keeps that the summary-only request loses."""
    report = evaluate(tau_fixtures(), options=EvalOptions())
    checks = [c for t in report.tickets for c in t.facts]
    assert checks and all(c.baseline_context is not None and c.in_transcript is not None for c in checks)
    assert all(c.state and c.context for c in checks)  # the desk keeps every fact
    # Its summaries refer to pinned items by id instead of restating them: without the state they say less.
    assert any(not c.context_without_state for c in checks)
    lost = [c for c in checks if not c.baseline_context]
    assert lost, "the summary-only baseline keeps everything: the comparison measures nothing"
    # The baseline never counts the state as its merit: its context has no pinned-state message.
    totals = report.totals()["retention"]["customer_constraints"]
    assert totals["baseline_in_context"] < totals["in_state"] == totals["total"]


# --- every published domain, with its money ---


def test_every_published_domain_is_reported_with_the_money_of_its_transcripts_and_states() -> None:
    report = evaluate(tau_fixtures(), options=EvalOptions())
    domains = report.by_domain()
    assert set(domains) == {
        "tau-bench retail",
        "tau-bench airline",
        "tau2-bench airline",
        "tau2-bench telecom",
    }
    for name, figures in domains.items():
        money = figures["money"]
        for total in ("refunded_cents_total", "charged_cents_total", "credited_cents_total"):
            assert money[total]["independent"] == money[total]["state_of_checked"], (name, total)
    # Each total lands where its tool's direction says: refunds (a cancellation, an item change), charges
    # (a booking, bags, telecom's refuel and payment), credits (a certificate).
    money = {name: figures["money"] for name, figures in domains.items()}
    assert money["tau-bench retail"]["refunded_cents_total"]["state"] == 18246 + 1799
    assert money["tau-bench airline"]["refunded_cents_total"]["state"] == 75800
    assert money["tau-bench airline"]["credited_cents_total"]["state"] == 20000
    assert money["tau-bench airline"]["charged_cents_total"]["state"] == 19200 + 5000
    # The flight change refunded $120: a charge tool's refund stays in its args (the replay sees it).
    assert money["tau2-bench airline"]["refunded_cents_total"]["state"] == 43000
    assert money["tau2-bench telecom"]["charged_cents_total"]["state"] == 8550 + 400
    assert money["tau2-bench telecom"]["tickets_checked"] == 0  # no initial data for telecom here
    airline = next(t for t in report.tickets if t.domain == "tau2-bench airline")
    assert airline.money_replayed == {
        "refunded_cents": 12000 + 43000,
        "charged_cents": 0,
        "credited_cents": 0,
    }
    assert report.ok, report.problems()
