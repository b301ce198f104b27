"""The review workflow: the queue finds unreviewed compactions worth a look, the review page records a
verdict and steps to the next one, and forced or over-budget events are explained."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from compaction.models import CompactionEvent, CompactionReview
from compaction.queue_figures import ticket_figures_refresh
from core.vocabulary import CompactionStatus
from tests.browser.desk_data import import_seed_t40118
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

pytestmark = pytest.mark.django_db


def forced_ticket(ticket_id: str, status: str = CompactionStatus.FORCED) -> Ticket:
    klass, _ = TicketClass.objects.get_or_create(slug="small-4k", defaults={"token_budget": 4000})
    ticket = open_ticket(ticket_id=ticket_id, order_id="SU-9", seller_type="marketplace", ticket_class=klass)
    CompactionEvent.objects.create(
        ticket=ticket,
        number=1,
        at_turn=9,
        status=status,
        reason="hard ceiling: 4100 tokens exceed the 4000-token budget before a boundary",
        first_replaced_turn=1 if status == CompactionStatus.FORCED else None,
        last_replaced_turn=5 if status == CompactionStatus.FORCED else None,
        tokens_before=4100,
        tokens_after=2000 if status == CompactionStatus.FORCED else None,
        threshold_tokens=3200,
        token_budget=4000,
    )
    # Made by hand, as the compaction services would have written it: its figures stored as those do.
    ticket_figures_refresh(tickets=Ticket.objects.filter(pk=ticket.pk))
    return ticket


def test_the_unreviewed_filter_lists_misses_and_forced_and_drops_a_ticket_once_reviewed(
    sam: Client, scenario: dict
) -> None:
    import_seed_t40118(scenario)
    forced_ticket("T-9001")
    quiet = forced_ticket("T-9002", status=CompactionStatus.DEFERRED)
    html = sam.get("/", {"flags": "needs_review"}).content.decode()
    assert "T-40118" in html and "T-9001" in html and quiet.ticket_id not in html
    event = CompactionEvent.objects.get(ticket__ticket_id="T-40118", status="applied")
    sam.post(event.get_absolute_url() + "review/", {"verdict": "summary_bad", "comment": "lost the refund"})
    html = sam.get("/", {"flags": "needs_review"}).content.decode()
    results = html[html.index('id="results"') :]
    assert "T-40118" not in results and "T-9001" in results


def test_forced_and_no_safe_cut_are_flagged_on_the_queue(sam: Client) -> None:
    forced_ticket("T-9001")
    forced_ticket("T-9003", status=CompactionStatus.OVER_BUDGET)
    html = sam.get("/", {"flags": "forced"}).content.decode()
    assert 'class="flag flag-forced"' in html and "no safe cut" in html


def test_over_budget_now_flags_the_present_not_a_past_deferral(sam: Client) -> None:
    """A ticket once deferred over budget but now small is not flagged."""
    ticket = forced_ticket("T-9004", status=CompactionStatus.DEFERRED)
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=300)
    assert "T-9004" not in sam.get("/", {"flags": "over_budget"}).content.decode()
    Ticket.objects.filter(pk=ticket.pk).update(context_tokens=4500)
    assert "T-9004" in sam.get("/", {"flags": "over_budget"}).content.decode()


def test_saving_a_review_goes_to_the_next_unreviewed_compaction(sam: Client, scenario: dict) -> None:
    import_seed_t40118(scenario)
    other = forced_ticket("T-9001")
    event = CompactionEvent.objects.get(ticket__ticket_id="T-40118", status="applied")
    page = sam.get(event.get_absolute_url()).content.decode()
    assert 'id="next-unreviewed"' in page and "T-9001 #1" in page
    response = sam.post(event.get_absolute_url() + "review/", {"verdict": "fine", "comment": ""})
    assert response.status_code == 302
    assert response["Location"] == other.compactions.get().get_absolute_url()
    review = CompactionReview.objects.get(event=event)
    assert review.verdict == "fine" and review.by.username == "sam"
    shown = sam.get(event.get_absolute_url()).content.decode()
    assert "verdict-fine" in shown and "by sam" in shown


def test_a_bad_verdict_without_a_comment_is_refused_on_the_page(sam: Client, scenario: dict) -> None:
    import_seed_t40118(scenario)
    event = CompactionEvent.objects.get(ticket__ticket_id="T-40118", status="applied")
    response = sam.post(event.get_absolute_url() + "review/", {"verdict": "summary_bad", "comment": " "})
    assert response.status_code == 422
    assert "a comment is required" in response.content.decode()
    assert not CompactionReview.objects.exists()
    assert sam.post(event.get_absolute_url() + "review/", {"verdict": "meh"}).status_code == 422


def test_review_next_opens_the_oldest_unreviewed_or_says_none_is_left(sam: Client, scenario: dict) -> None:
    response = sam.get("/reviews/next/", follow=True)
    assert "No compaction is waiting for review." in response.content.decode()
    import_seed_t40118(scenario)
    assert sam.get("/reviews/next/")["Location"] == "/tickets/T-40118/compactions/2/"


def test_a_forced_compaction_is_explained_on_its_review_page(sam: Client) -> None:
    forced_ticket("T-9001")
    html = sam.get("/tickets/T-9001/compactions/1/").content.decode()
    assert "Forced by the hard ceiling" in html and "4100 tokens exceed the 4000-token budget" in html
    forced_ticket("T-9003", status=CompactionStatus.OVER_BUDGET)
    html = sam.get("/tickets/T-9003/compactions/1/").content.decode()
    assert "Over budget with no safe cut" in html


def test_the_seed_review_shows_the_refund_missing(
    sam: Client, scenario: dict, django_assert_max_num_queries: Any
) -> None:
    import_seed_t40118(scenario)
    html = sam.get("/tickets/T-40118/compactions/2/").content.decode()
    assert 'class="missing" data-item="A1"' in html and "MISSING" in html
    assert "the buyer reported cosmetic damage to the table" in html.lower()
