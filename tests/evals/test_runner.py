"""The compaction eval: what survives compaction, measured in a transaction that is rolled back."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from compaction.models import CompactionEvent
from desk.importer import ImportTicket, import_ticket, load_file
from evals.facts import Fact, check_facts, in_context, in_state
from evals.results import EvalOptions, EvalReport
from evals.runner import evaluate, probe_repeat
from evals.sources import expand, load
from tests.fake_openai import Reply
from tickets.models import PinnedState, StateChange, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db

REPO = Path(settings.BASE_DIR)
EVALSET = REPO / "demo" / "evalset"
T40118 = REPO / "demo" / "T-40118.json"
TAU2_FILE = Path(settings.BASE_DIR) / "demo" / "realdata" / "tau2-retail-gpt-4.1.json"  # MIT, see its README

# The simulations of the public file with the most writes (cancellations with refunds, returns,
# item and address changes), plus two short ones: a handful that runs in a few seconds.
TAU2_SAMPLE = {
    "tau2-retail-55-9914829a",  # two cancellations (refunds) and two returns
    "tau2-retail-42-a572d1c5",  # user address, two order addresses, an item change
    "tau2-retail-32-50f23490",  # two cancellations and a return
    "tau2-retail-102-2445ac5f",  # address, item change with refund, exchange
    "tau2-retail-40-55094b9e",  # payment method change: refund and charge
    "tau2-retail-12-0c18a52c",  # no write at all
}


def documents(path: Path, only: set[str] | None = None) -> list[tuple[str, ImportTicket]]:
    _, docs = load(path)
    return [(str(path), d) for d in docs if only is None or d.ticket_id in only]


def row_counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Ticket, Turn, TicketClass, PinnedState, StateChange, CompactionEvent)
    }


def action_checks(report: EvalReport) -> list[Any]:
    return [c for t in report.tickets for c in t.facts if c.fact.category == "actions_taken"]


def test_public_tau2_sample_keeps_every_write_and_constraint_and_refuses_every_repeat() -> None:
    """Extractive summarizer, small budget: compaction fires, and nothing with a consequence is lost."""
    report = evaluate(documents(TAU2_FILE, TAU2_SAMPLE), options=EvalOptions(summarizer="extractive"))
    assert {t.ticket_id for t in report.tickets} == TAU2_SAMPLE
    assert all(not t.error for t in report.tickets)
    assert all(t.compactions.get("applied", 0) + t.compactions.get("forced", 0) >= 1 for t in report.tickets)
    totals = report.totals()
    actions = totals["retention"]["actions_taken"]
    constraints = totals["retention"]["customer_constraints"]
    assert actions["total"] == 15  # the successful writes of these six simulations (4+4+3+3+1+0)
    assert actions["in_state"] == actions["in_context"] == actions["total"]
    assert (
        constraints["total"] > 0
        and constraints["in_state"] == constraints["in_context"] == constraints["total"]
    )
    assert actions["in_summary"] == actions["summary_due"] > 0
    assert totals["probes"]["total"] == 15 and totals["probes"]["refused"] == 15
    refunded = totals["money"]["refunded_cents_total"]
    assert refunded["state_of_checked"] == refunded["independent"] > 0 and refunded["tickets_differing"] == 0
    assert totals["tokens"]["saved"] > 0
    assert totals["tokens"]["context"] < totals["tokens"]["uncompacted"]
    assert report.ok


def lossy_summary() -> str:
    scenario = json.loads(T40118.read_text())
    return json.dumps(scenario["lossy_summary_turns_1_14"])


def test_lossy_summary_of_t40118_loses_the_refund_but_the_state_and_context_keep_it(
    openai_server: Any,
) -> None:
    """The seed's failure, measured: the refund is missing from the summary, present in the state and context."""
    with openai_server([Reply(content=lossy_summary())]) as fake:
        report = evaluate(documents(T40118), options=EvalOptions(summarizer="openai", model="cheap-model"))
    assert fake.requests, "the summarizer server was called"
    assert fake.requests[0]["body"]["model"] == "cheap-model"
    [ticket] = report.tickets
    assert not ticket.error and ticket.compactions.get("applied") == 1
    [refund] = [c for c in ticket.facts if c.fact.category == "actions_taken"]
    assert (refund.fact.tool, refund.fact.item, refund.fact.amount_cents) == (
        "issue_refund",
        "garden-table",
        4000,
    )
    assert refund.summary is False
    assert refund.state is True
    assert refund.context is True
    assert refund.only_in_state is True  # without the pinned-state message the agent could not see it
    assert ticket.engine_coverage_misses >= 1  # the compaction itself flagged the miss
    assert [p.refused for p in ticket.probes] == [True]
    assert ticket.scripted_refusals == 1  # the turn-26 second refund was refused on import
    assert ticket.money_state["refunded_cents_total"] == 4000
    assert ticket.ok  # nothing lost where it matters: the state and the context


def test_extractive_summary_of_t40118_keeps_the_refund_in_the_summary_too() -> None:
    """The same ticket through the offline summarizer: the control for the lossy run above."""
    report = evaluate(documents(T40118), options=EvalOptions(summarizer="extractive"))
    [refund] = action_checks(report)
    assert (refund.state, refund.summary, refund.context, refund.only_in_state) == (True, True, True, False)


def test_eval_leaves_the_database_as_it_was() -> None:
    """Everything happens in a rolled-back transaction, even with the same ticket already in the database."""
    existing = import_ticket(load_file(T40118)[0])
    assert existing.turns == 26
    before = row_counts()
    report = evaluate(documents(T40118), options=EvalOptions(budget=1500))
    assert report.tickets[0].ticket_id == "T-40118" and not report.tickets[0].error
    assert report.tickets[0].budget == 1500
    assert row_counts() == before
    assert not TicketClass.objects.filter(slug__startswith="eval-").exists()


def test_budget_option_makes_compaction_fire_more_often() -> None:
    own = evaluate(documents(T40118), options=EvalOptions())
    small = evaluate(documents(T40118), options=EvalOptions(budget=1024))
    assert own.tickets[0].budget == 8000 and small.tickets[0].budget == 1024
    assert small.tickets[0].compactions.get("applied", 0) > own.tickets[0].compactions.get("applied", 0)


def test_the_eval_set_imports_compacts_and_keeps_every_fact() -> None:
    """The project's own eval set: every ticket imports, compacts at its own budget, and loses nothing."""
    paths = expand([EVALSET])
    assert len(paths) >= 13 and EVALSET / "T-40118.json" in paths
    docs = [(str(p), d) for p in paths for d in load(p)[1]]
    report = evaluate(docs, options=EvalOptions())
    assert [t.error for t in report.tickets] == [""] * len(docs)
    assert all(t.compactions.get("applied", 0) >= 1 for t in report.tickets)
    totals = report.totals()
    for category in ("actions_taken", "customer_constraints", "open_questions"):
        counts = totals["retention"][category]
        assert counts["total"] > 0
        assert counts["in_state"] == counts["in_context"] == counts["total"], category
    assert totals["probes"]["refused"] == totals["probes"]["total"] > 0
    assert totals["scripted_refusals"] == 2  # E02 and T-40118 try a second refund
    assert report.ok


def test_a_question_resolved_before_compaction_is_not_expected_but_a_later_open_one_is() -> None:
    [(source, doc)] = documents(EVALSET / "E03-question-resolved-before-compaction.json")
    [ticket] = evaluate([(source, doc)], options=EvalOptions()).tickets
    questions = [c.fact.text for c in ticket.facts if c.fact.category == "open_questions"]
    assert questions == ["does the customer still have the rug's original packaging?"]


def test_a_big_tool_result_at_the_threshold_defers_compaction_to_the_next_reply() -> None:
    """E04: the threshold is crossed by a tool result; compaction waits for the agent's reply."""
    import_ticket(load_file(EVALSET / "E04-tool-result-mid-decision.json")[0])
    events = list(
        CompactionEvent.objects.filter(ticket__ticket_id="E04-tool-result-mid-decision").order_by("number")
    )
    deferred = [e for e in events if e.status == "deferred"]
    assert deferred
    for event in deferred:
        turn = Turn.objects.get(ticket=event.ticket, number=event.at_turn)
        assert turn.role == "tool_result"
        following = next(e for e in events if e.number == event.number + 1)
        assert following.status == "applied"
        assert Turn.objects.get(ticket=event.ticket, number=following.at_turn).role == "agent"


def test_a_deliberate_repeat_is_two_actions_and_a_third_is_refused() -> None:
    [(source, doc)] = documents(EVALSET / "E06-deliberate-repeat-with-reason.json")
    [ticket] = evaluate([(source, doc)], options=EvalOptions()).tickets
    refunds = [c for c in ticket.facts if c.fact.category == "actions_taken"]
    assert [c.fact.amount_cents for c in refunds] == [2000, 2500]
    assert all(c.state for c in refunds)
    assert [p.refused for p in ticket.probes] == [True]
    assert ticket.money_state["refunded_cents_total"] == 4500


def test_the_checks_can_fail_a_fact_missing_from_the_state_or_the_context() -> None:
    """The measurement is not a tautology: a fact absent from the state or the messages is reported missing."""
    refund = Fact(
        "actions_taken", stored_at=7, at_turn=6, tool="issue_refund", item="garden-table", amount_cents=4000
    )
    constraint = Fact("customer_constraints", stored_at=3, at_turn=3, text="no replacement wanted")
    empty_state: dict[str, Any] = {"actions_taken": [], "customer_constraints": [], "open_questions": []}
    assert in_state([refund, constraint], empty_state) == [False, False]
    messages = [
        {"role": "system", "content": "You are Sundry's support agent."},
        {"role": "customer", "content": "What about the table?"},
    ]
    assert in_context([refund, constraint], messages) == [False, False]
    other_refund = {"tool": "issue_refund", "item": "garden-table", "amount_cents": 2000}
    assert in_state([refund], {"actions_taken": [other_refund]}) == [False]
    [check] = check_facts(
        [refund],
        state=empty_state,
        summary={"actions_taken": []},
        summary_written_at=10,
        contexts=[(None, messages)],
    )
    assert (check.state, check.summary, check.context) == (False, False, False)


def test_a_repeat_probe_is_not_refused_when_there_is_no_earlier_action(standard_class: TicketClass) -> None:
    ticket = open_ticket(
        ticket_id="T-P", order_id="SU-P", seller_type="marketplace", ticket_class=standard_class
    )
    probe = probe_repeat(ticket, tool="issue_refund", item="garden-table", amount_cents=4000)
    assert probe.refused is False
    assert PinnedState.objects.get(ticket=ticket).agent_json()["actions_taken"] == []  # the probe was undone
    record_action(
        ticket=ticket, tool="issue_refund", item="garden-table", amount_cents=4000, idempotency_key="k1"
    )
    assert probe_repeat(ticket, tool="issue_refund", item="garden-table", amount_cents=4000).refused is True


def test_command_prints_clean_json_on_stdout_and_progress_on_stderr() -> None:
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("compaction_eval", str(T40118), "--json", stdout=stdout, stderr=stderr)
    data = json.loads(stdout.getvalue())
    assert data["summarizer"] == "extractive"
    assert data["totals"]["tickets"] == 1 and data["totals"]["ok"] is True
    [ticket] = data["tickets"]
    retention = ticket["retention"]["actions_taken"]
    assert {k: retention[k] for k in ("total", "in_state", "summary_due", "in_summary", "in_context")} == {
        "total": 1,
        "in_state": 1,
        "summary_due": 1,
        "in_summary": 1,
        "in_context": 1,
    }
    assert set(data) >= {"totals", "files", "domains", "problems", "tickets", "cost"}
    cost = data["cost"]
    assert cost["compactions"] == len(ticket["cost"]["compactions"]) >= 1
    assert cost["tokens_not_resent"] == ticket["cost"]["tokens_not_resent"] > 0
    assert cost["compaction_to_turn_ratio"] == 0  # the extractive summarizer makes no model call
    assert set(cost["by_domain"]) == {"sundry-ticket"}
    refunded = data["domains"]["sundry-ticket"]["money"]["refunded_cents_total"]
    assert (refunded["independent"], refunded["state"]) == (4000, 4000)
    assert ticket["money"]["state"] == {
        "refunded_cents_total": 4000,
        "charged_cents_total": 0,
        "credited_cents_total": 0,
    }
    assert ticket["money"]["independent"] == ticket["money"]["state"]
    assert ticket["tokens"]["saved"] == ticket["tokens"]["uncompacted"] - ticket["tokens"]["context"] > 0
    assert "evaluated 1 ticket(s)" in stderr.getvalue()


def test_command_prints_a_table_with_totals() -> None:
    stdout = io.StringIO()
    call_command(
        "compaction_eval",
        str(EVALSET / "E05-two-refunds-different-items.json"),
        stdout=stdout,
        stderr=io.StringIO(),
    )
    text = stdout.getvalue()
    assert "E05-two-refunds-different-items.json" in text  # the file's row
    assert "irreversible actions  2/2 (100%)" in text
    assert "desk summary (copied from the state)" in text  # the extractive summary says what it is
    assert "repeat probes refused: 2/2 (100%)" in text
    assert text.rstrip().endswith("every compaction shrank the request, nothing lost")


def test_a_turn_whose_events_push_the_request_over_the_threshold_compacts_at_its_boundary() -> None:
    """A turn's own state events count toward the trigger (the eval caught 50e2e16 missing them; fixed in 82f1f87)."""
    doc = ImportTicket.model_validate(
        {
            "ticket_id": "T-DUE",
            "order_id": "SU-1",
            "seller_type": "marketplace",
            "ticket_class": {"slug": "tiny-512", "token_budget": 512, "compaction_threshold": 0.8},
            "turns": [
                {"role": "customer", "content": "word " * 200},
                {"role": "agent", "content": "ok", "boundary": "reply_sent"},
                {"role": "customer", "content": "short"},
                {
                    "role": "agent",
                    "content": "noted",
                    "boundary": "reply_sent",
                    "events": [{"type": "constraint_stated", "text": "constraint " + "xxxxx " * 60}],
                },
            ],
        }
    )
    report = import_ticket(doc)
    ticket = Ticket.objects.get(ticket_id="T-DUE")
    last = ticket.turns.order_by("-number").first()
    assert last is not None and last.context_tokens <= ticket.ticket_class.threshold_tokens
    # the premise: the turn alone was under the threshold; its constraint event took the request over it
    assert ticket.state_changes.filter(thread_turn=4, op="constraint_stated").exists()
    assert report.compactions.get("applied") == 1, (
        f"the request ended at {ticket.context_tokens} tokens, over the threshold "
        f"{ticket.ticket_class.threshold_tokens}, at a boundary, and did not compact"
    )
