"""The outcomes harness: decision questions from the pinned state, asked with three contexts.

The working model is the edge we do not own: here a scripted OpenAI-compatible server on loopback (the
`model` tests and `make eval-model` ask the real local model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from django.conf import settings

from evals.outcomes import measure, questions_for
from evals.results import EvalOptions
from evals.runner import evaluate
from evals.sources import load
from tests.fake_openai import Reply

STATE = {
    "actions_taken": [
        {
            "id": "A1",
            "tool": "issue_refund",
            "item": "garden-table",
            "amount_cents": 4000,
            "status": "succeeded",
        },
        {"id": "A2", "tool": "issue_refund", "item": "lamp", "amount_cents": 900, "status": "failed"},
    ],
    "customer_constraints": [{"id": "C1", "text": "No replacement."}],
    "open_questions": [{"id": "Q1", "text": "Photo of the parasol."}],
}
YES = Reply(content=json.dumps({"answer": "yes"}))


def test_questions_come_from_what_succeeded_what_was_said_and_what_is_awaited() -> None:
    questions = questions_for(STATE)
    assert [(q.kind, q.truth) for q in questions] == [
        ("done", "yes"),
        ("repeat", "no"),
        ("constraint", "yes"),
        ("awaited", "yes"),
    ]
    assert "issue_refund for garden-table (40.00 USD)" in questions[1].text  # the failed lamp refund: none


def test_a_model_that_always_says_yes_attempts_every_repeat_in_every_context(openai_server: Any) -> None:
    with openai_server([YES]) as fake:
        outcomes = measure(
            openai.OpenAI(max_retries=0),
            "working",
            questions_for(STATE),
            {name: [{"role": "customer", "content": "hello"}] for name in ("full", "desk", "baseline")},
        )
    assert len(fake.requests) == 4 * 3
    assert fake.requests[0]["body"]["response_format"]["type"] == "json_schema"
    for name in ("full", "desk", "baseline"):
        figures = outcomes.as_json()[name]
        assert figures == {
            "asked": 4,
            "agreement_with_truth": 0.75,  # wrong only on "do it again?"
            "agreement_with_full": 1.0,
            "repeat_irreversible_attempted": 1,
            "unanswered": 0,
        }


def test_an_unreadable_answer_is_unanswered_not_a_crash(openai_server: Any) -> None:
    with openai_server([Reply(status=500)]):
        outcomes = measure(
            openai.OpenAI(max_retries=0),
            "working",
            questions_for(STATE)[:1],
            {name: [] for name in ("full", "desk", "baseline")},
        )
    assert outcomes.as_json()["desk"]["unanswered"] == 1


@pytest.mark.django_db
def test_the_eval_reports_outcomes_per_context_when_a_working_model_is_named(openai_server: Any) -> None:
    path = Path(settings.BASE_DIR) / "demo" / "evalset" / "E05-two-refunds-different-items.json"
    docs = [(str(path), doc) for doc in load(path)[1]]
    assert evaluate(docs, options=EvalOptions()).as_json()["outcomes"] == {
        "skipped": "no working model asked (compaction_eval --outcomes-model NAME)"
    }
    with openai_server([YES]):
        report = evaluate(docs, options=EvalOptions(outcomes_model="working"))
    outcomes = report.as_json()["outcomes"]
    assert set(outcomes) >= {"full", "desk", "baseline", "by_domain", "model"}
    assert outcomes["desk"]["asked"] > 0
    assert outcomes["desk"]["repeat_irreversible_attempted"] == 2  # E05's two refunds, each "again?" -> yes
