"""The scripted backend replays a fixed summary by name: the seed's lossy T-40118 summary for the demo."""

from __future__ import annotations

import pytest

from compaction.summarizers import ScriptedSummarizer, SummarizerError, SummaryRequest, get_summarizer
from core.summary import Summary
from core.vocabulary import CompactionStatus
from tests.browser.desk_data import import_seed_t40118

REQUEST = SummaryRequest(
    ticket_id="T-1", model="seed-lossy-t40118", pinned_state={}, previous_summary=None, turns=[]
)


def test_the_seed_script_is_the_seeds_summary_and_reports_usage() -> None:
    reply = get_summarizer("scripted").summarize(REQUEST, timeout=1)
    summary = Summary.model_validate_json(reply.text)
    assert (
        "the buyer reported cosmetic damage to the table and declined a replacement"
        in summary.narrative.lower()
    )
    assert summary.actions_taken == []
    assert reply.input_tokens > 0 and reply.output_tokens > 0


def test_an_unknown_script_is_a_failed_attempt_not_a_crash() -> None:
    with pytest.raises(SummarizerError, match="no scripted summary named 'nope'"):
        ScriptedSummarizer().summarize(
            SummaryRequest(ticket_id="T-1", model="nope", pinned_state={}, previous_summary=None, turns=[])
        )


@pytest.mark.django_db
def test_t40118_on_the_seed_class_loses_the_refund_and_the_check_catches_it(scenario: dict) -> None:
    ticket = import_seed_t40118(scenario)
    event = ticket.compactions.get(status=CompactionStatus.APPLIED)
    assert (event.at_turn, event.summarizer_backend, event.summarizer_model) == (
        22,
        "scripted",
        "seed-lossy-t40118",
    )
    missing = {(m["category"], m["id"]) for m in event.coverage["missing"]}
    assert ("actions_taken", "A1") in missing
    assert event.cost_usd > 0
