"""The rolling-summary baseline written by a model (`compaction_eval --baseline model`), and `--limit`.

The model is the edge we do not own: a scripted OpenAI-compatible server on loopback here; the `model`-marked
test at the end runs it against the real local model on one short ticket.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from core.tokens import STATE_PREFIX
from evals.baseline import (
    ROLLING_TEMPLATE,
    conversation_line,
    model_rolling_summary,
    rolling_prompt,
)
from evals.results import EvalOptions
from evals.runner import evaluate
from evals.sources import load
from tests.fake_openai import Reply

REPO = Path(settings.BASE_DIR)
EVALSET = REPO / "demo" / "evalset"
E05 = EVALSET / "E05-two-refunds-different-items.json"
TAU = REPO / "evals" / "fixtures" / "tau"

TURNS = [
    {"number": 3, "role": "customer", "content": "The lamp\u2011shade is dented.  Please help."},
    {
        "number": 4,
        "role": "tool_call",
        "tool": "issue_refund",
        "args": {"item": "table-lamp", "amount_cents": 1200},
    },
    {"number": 5, "role": "tool_result", "tool": "issue_refund", "content": ""},
    {"number": 6, "role": "agent", "content": "The $12 refund for the lamp is done."},
]


def documents(path: Path) -> list[tuple[str, Any]]:
    return [(str(path), doc) for doc in load(path)[1]]


def test_the_prompt_is_the_framework_template_with_the_previous_summary_and_whole_turns() -> None:
    prompt = rolling_prompt("Earlier: the customer ordered a lamp.", TURNS)
    assert prompt.startswith("Progressively summarize the lines of conversation provided")
    assert "Current summary:\nEarlier: the customer ordered a lamp.\n" in prompt
    assert (
        "Human: The lamp\u2011shade is dented. Please help." in prompt
    )  # whole turn, not its first sentence
    assert 'AI called issue_refund({"amount_cents": 1200, "item": "table-lamp"})' in prompt
    assert "Tool issue_refund returned: (empty)" in prompt
    assert prompt.endswith("AI: The $12 refund for the lamp is done.\n\nNew summary:")
    assert rolling_prompt("", TURNS[:1]).count("(none yet)") == 1
    assert conversation_line({"role": "system", "content": "x"}) == ""
    assert ROLLING_TEMPLATE.count("{summary}") == 1


def test_a_model_summary_is_its_prose_with_the_servers_usage(openai_server: Any) -> None:
    reply = Reply(
        content="  The customer got a $12 refund\nfor the lamp. ", prompt_tokens=321, completion_tokens=17
    )
    with openai_server([reply]) as fake:
        got = model_rolling_summary(openai.OpenAI(max_retries=0), "small", "before", TURNS, max_tokens=10)
    assert (got.text, got.input_tokens, got.output_tokens, got.error) == (
        "The customer got a $12 refund for the lamp.",
        321,
        17,
        "",
    )
    [request] = fake.requests
    assert request["body"]["model"] == "small"
    assert request["body"]["max_tokens"] == 64  # at least enough for a sentence, whatever the room
    assert "response_format" not in request["body"]  # prose, as a framework asks for it
    assert STATE_PREFIX not in json.dumps(request["body"])


def test_a_failed_call_keeps_the_previous_summary_and_says_so(openai_server: Any) -> None:
    with openai_server([Reply(status=500)]):
        got = model_rolling_summary(openai.OpenAI(max_retries=0), "small", "before", TURNS, max_tokens=300)
    assert got.text == "before"
    assert got.error.startswith("InternalServerError")


@pytest.mark.django_db
def test_the_eval_measures_both_baselines_and_the_models_never_sees_the_state(openai_server: Any) -> None:
    """E05 (two refunds, four compactions): the model baseline is asked once per replacing compaction, gets
    its own previous summary back, and is measured beside the first-sentence one, fact by fact."""
    summary = "The customer was refunded $12 for the table-lamp and $30 for the side-table."
    with openai_server([Reply(content=summary, prompt_tokens=700, completion_tokens=30)]) as fake:
        report = evaluate(documents(E05), options=EvalOptions(baseline="model", model="small"))
    [ticket] = report.tickets
    applied = ticket.compactions.get("applied", 0) + ticket.compactions.get("forced", 0)
    assert applied >= 2 and len(fake.requests) == applied
    prompts = [r["body"]["messages"][0]["content"] for r in fake.requests]
    assert "Current summary:\n(none yet)" in prompts[0]
    assert all(f"Current summary:\n{summary}" in p for p in prompts[1:])  # it folds its own summary
    assert not any(STATE_PREFIX in p or '"actions_taken"' in p for p in prompts)
    assert ticket.model_baseline is not None
    assert ticket.model_baseline.as_json() | {"latency_ms": 0} == {
        "calls": applied,
        "failures": 0,
        "input_tokens": 700 * applied,
        "output_tokens": 30 * applied,
        "latency_ms": 0,
        "errors": [],
    }
    refunds = [c for c in ticket.facts if c.fact.category == "actions_taken"]
    assert [c.model_baseline_context for c in refunds] == [True, True]  # the model's summary names both
    assert [c.baseline_context for c in refunds] == [False, False]  # the first-sentence one lost them
    retention = report.totals()["retention"]["actions_taken"]
    assert (retention["model_baseline_in_context"], retention["baseline_in_context"]) == (2, 0)
    assert ticket.tokens_model_baseline_context is not None
    assert 0 < ticket.tokens_model_baseline_context < ticket.tokens_baseline_context
    assert report.as_json()["baseline"] == "model"


@pytest.mark.django_db
def test_a_model_summary_that_keeps_nothing_is_measured_not_a_check_failure(openai_server: Any) -> None:
    out = io.StringIO()
    with openai_server([Reply(content="They talked about furniture.")]):
        call_command(
            "compaction_eval", "--check", "--baseline", "model", "--model", "small", str(E05), stdout=out
        )
    text = out.getvalue()
    assert "model baseline ctx" in text and "first-sentence baseline ctx" in text
    assert "model (a rolling summary written by small: " in text
    assert "OK: nothing over budget" in text


@pytest.mark.django_db
def test_a_model_baseline_needs_a_model() -> None:
    with pytest.raises(CommandError, match="--baseline model needs a model"):
        call_command("compaction_eval", "--baseline", "model", str(E05), stdout=io.StringIO())


@pytest.mark.django_db
def test_limit_takes_the_first_tickets_of_each_path() -> None:
    out = io.StringIO()
    call_command("compaction_eval", "--json", "--limit", "2", str(EVALSET), str(TAU), stdout=out)
    report = json.loads(out.getvalue())
    ids = [t["ticket_id"] for t in report["tickets"]]
    assert ids[:2] == ["E01-constraint-in-passing", "E02-refund-then-long-thread"]
    assert len(ids) == 4 and {t["source"] for t in report["tickets"][2:]} == {str(TAU)}
    assert report["limit"] == 2
    with pytest.raises(CommandError, match="--limit must be at least 1"):
        call_command("compaction_eval", "--limit", "0", str(E05), stdout=io.StringIO())


@pytest.mark.django_db
@pytest.mark.model
def test_the_real_model_writes_the_baseline_of_one_short_ticket(local_model: Any) -> None:
    """SmolLM2-135M writes E05's rolling summaries: prose, the server's usage, no failed call. What it keeps
    is measured (a floor for a 135M model), never asserted."""
    report = evaluate(documents(E05), options=EvalOptions(baseline="model", model=local_model.model))
    [ticket] = report.tickets
    assert not ticket.error
    usage = ticket.model_baseline
    assert usage is not None and usage.calls >= 2 and usage.failures == 0, usage
    assert usage.input_tokens > 200 * usage.calls and usage.output_tokens > 0
    assert ticket.tokens_model_baseline_context and ticket.tokens_model_baseline_context > 0
    assert all(c.model_baseline_context is not None for c in ticket.facts)


@pytest.mark.django_db
def test_the_outcome_table_names_which_baseline_its_baseline_context_carries(openai_server: Any) -> None:
    out = io.StringIO()
    answers = [Reply(content="The customer got two refunds.")] * 4 + [
        Reply(content=json.dumps({"answer": "no"}))
    ]
    with openai_server(answers):
        call_command(
            "compaction_eval",
            "--baseline",
            "model",
            "--model",
            "small",
            "--outcomes-model",
            "small",
            "--json",
            str(E05),
            stdout=out,
        )
    outcomes = json.loads(out.getvalue())["outcomes"]
    assert outcomes["baseline_kind"] == "model"
    text = io.StringIO()
    with openai_server([Reply(content=json.dumps({"answer": "yes"}))]):
        call_command(
            "compaction_eval", "--model", "small", "--outcomes-model", "small", str(E05), stdout=text
        )
    assert "outcomes (small; a floor; baseline = first-sentence)" in text.getvalue()
    assert set(outcomes) >= {"full", "desk", "baseline"} and outcomes["baseline"]["asked"] > 0
