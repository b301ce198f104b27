"""Supervisors' reviews of compactions, kept as annotation queues keep them: one verdict and a comment
per look, appended, never edited. The newest review of an event is its current verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from compaction.models import CompactionEvent, CompactionReview, ReviewVerdict
from compaction.queue_figures import ticket_figures_reviewed
from core.errors import InvalidInput
from core.vocabulary import CompactionStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User

COMMENT_MAX_CHARS = 4000


@transaction.atomic
def compaction_review_record(
    *, event: CompactionEvent, by: User, verdict: str, comment: str
) -> CompactionReview:
    """Record a supervisor's verdict on a compaction. A verdict other than "fine" needs a comment that
    says what was wrong; a compaction still waiting for its summarizer cannot be reviewed yet."""
    if verdict not in ReviewVerdict.values:
        raise InvalidInput(
            f"unknown verdict {verdict!r}: choose one of {', '.join(ReviewVerdict.values)}", field="verdict"
        )
    comment = comment.strip()
    if len(comment) > COMMENT_MAX_CHARS:
        raise InvalidInput(f"the comment is over {COMMENT_MAX_CHARS} characters", field="comment")
    if verdict != ReviewVerdict.FINE and not comment:
        raise InvalidInput(
            "say what was wrong: a comment is required unless the compaction was fine", field="comment"
        )
    status = CompactionEvent.objects.filter(pk=event.pk).values_list("status", flat=True).get()
    if status == CompactionStatus.PENDING:
        raise InvalidInput("this compaction is still running: review it once it has finished", field="event")
    review = CompactionReview.objects.create(event=event, by=by, verdict=verdict, comment=comment)
    ticket_figures_reviewed(ticket_id=event.ticket_id)
    return review
