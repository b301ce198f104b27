"""Compaction reviews: a verdict with a comment, appended, the newest one current."""

from __future__ import annotations

import pytest

from compaction.models import CompactionEvent, CompactionReview
from compaction.reviews import compaction_review_record
from core.errors import InvalidInput
from core.vocabulary import CompactionStatus
from tests.browser.desk_data import import_seed_t40118, supervisor

pytestmark = pytest.mark.django_db


@pytest.fixture
def lossy(scenario: dict) -> CompactionEvent:
    ticket = import_seed_t40118(scenario)
    return ticket.compactions.get(status=CompactionStatus.APPLIED)


def test_a_verdict_is_recorded_with_its_comment_and_the_event_leaves_the_unreviewed_set(
    lossy: CompactionEvent,
) -> None:
    assert CompactionEvent.objects.worth_review().unreviewed().filter(pk=lossy.pk).exists()
    review = compaction_review_record(
        event=lossy, by=supervisor(), verdict="summary_bad", comment="  dropped the $40 refund  "
    )
    assert (review.verdict, review.comment) == ("summary_bad", "dropped the $40 refund")
    assert not CompactionEvent.objects.worth_review().unreviewed().filter(pk=lossy.pk).exists()


def test_a_second_look_appends_and_the_first_review_stays(lossy: CompactionEvent) -> None:
    sam = supervisor()
    compaction_review_record(event=lossy, by=sam, verdict="summary_bad", comment="missed A1")
    compaction_review_record(event=lossy, by=sam, verdict="state_corrected", comment="state was right")
    assert list(CompactionReview.objects.filter(event=lossy).values_list("verdict", flat=True)) == [
        "summary_bad",
        "state_corrected",
    ]


@pytest.mark.parametrize("comment", ["", "   ", "\n"])
def test_a_bad_verdict_without_a_comment_is_refused(lossy: CompactionEvent, comment: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        compaction_review_record(event=lossy, by=supervisor(), verdict="summary_bad", comment=comment)
    assert refused.value.detail["field"] == "comment"
    assert not CompactionReview.objects.exists()


def test_fine_needs_no_comment_but_an_unknown_verdict_is_refused(lossy: CompactionEvent) -> None:
    sam = supervisor()
    assert compaction_review_record(event=lossy, by=sam, verdict="fine", comment="").comment == ""
    with pytest.raises(InvalidInput):
        compaction_review_record(event=lossy, by=sam, verdict="Fine", comment="x")


def test_a_running_compaction_cannot_be_reviewed(lossy: CompactionEvent) -> None:
    pending = CompactionEvent.objects.create(
        ticket=lossy.ticket,
        number=9,
        at_turn=99,
        status=CompactionStatus.PENDING,
        tokens_before=1,
        threshold_tokens=1,
    )
    with pytest.raises(InvalidInput):
        compaction_review_record(event=pending, by=supervisor(), verdict="fine", comment="")
