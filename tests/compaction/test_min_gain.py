"""A compaction runs only when it pays: the class's `min_gain_share` of the budget, judged at the boundary before
anything is claimed; a pinned state that leaves too little room is said in the turn answer and on the queue; the
hard ceiling ignores the minimum."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from compaction.models import CompactionEvent
from desk.turns import TurnReceived, receive_turn
from tickets.accounts import create_agent
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db

WORDS = "the parcel with the garden\u2011table legs is still at the depot and the buyer asks again "


def ticket_of(ticket_id: str, **klass: object) -> Ticket:
    settings = {"token_budget": 2000, "compaction_threshold": 0.8, **klass}
    ticket_class = TicketClass.objects.create(slug=f"c-{ticket_id.lower()}", **settings)
    return open_ticket(
        ticket_id=ticket_id, order_id="SU-1", seller_type="marketplace", ticket_class=ticket_class
    )


def fill_state(ticket: Ticket, floor: int) -> None:
    """Constraints until the system prompt and pinned state are about `floor` tokens."""
    n = 0
    while ticket.system_prompt_tokens + ticket.pinned_state.tokens < floor:
        change_state(
            ticket=ticket,
            op="constraint_stated",
            text=f"refund to the original card only, never credit ({n})",
        )
        ticket.pinned_state.refresh_from_db()
        n += 1


def talk(
    ticket: Ticket, *, pairs: int = 200, stop: int | None = None, chars: int = 300
) -> list[TurnReceived]:
    """Customer and agent turns (every agent turn a boundary): `pairs` of them, or fewer once the request
    passes `stop` tokens (it must, within `pairs`)."""
    answers = []
    for _ in range(pairs):
        answers.append(receive_turn(ticket=ticket, role="customer", content=(WORDS * 5)[:chars]))
        answers.append(receive_turn(ticket=ticket, role="agent", content="Checking.", boundary="reply_sent"))
        if stop is not None and ticket.context_tokens > stop:
            return answers
    assert stop is None, f"the request never passed {stop} tokens"
    return answers


def test_a_boundary_whose_compaction_frees_too_little_is_not_run_and_says_why() -> None:
    """A long verbatim tail (keep_recent_tokens) leaves a cut that frees a few dozen tokens: not worth a call."""
    ticket = ticket_of("T-LOW", keep_recent_tokens=1500)  # threshold 1600, minimum gain 200
    answers = talk(ticket, stop=1600)
    boundary = next(a for a in answers if a.turn.boundary and a.context_tokens > 1600)
    answer = boundary.as_json()["compaction"]

    assert answer["status"] == "low_gain"
    assert answer["min_gain"] == 200 and 0 < answer["expected_gain"] < 200
    assert "minimum gain" in answer["reason"] and "0.1 of the 2000-token budget" in answer["reason"]
    assert "state_crowded" not in answer  # the state is small: the tail, not the state, is why
    assert not CompactionEvent.objects.filter(ticket=ticket).exclude(status="deferred").exists()


def test_the_same_boundary_with_no_minimum_compacts() -> None:
    """The control: min_gain_share 0 is the old rule, so the same boundary claims and runs a compaction."""
    ticket = ticket_of("T-NOMIN", keep_recent_tokens=1500, min_gain_share=0.0)
    answers = talk(ticket, stop=1600)
    boundary = next(a for a in answers if a.turn.boundary and a.context_tokens > 1600)
    assert boundary.compaction.status in {"applied", "failed"}
    assert CompactionEvent.objects.filter(ticket=ticket, at_turn=boundary.turn.number).exists()


def test_a_compaction_that_pays_runs_once_the_turns_have_grown() -> None:
    ticket = ticket_of("T-GROWS", keep_recent_tokens=1500)
    answers = talk(ticket, pairs=40)
    statuses = [a.compaction.status for a in answers if a.turn.boundary]
    assert "low_gain" in statuses
    applied = CompactionEvent.objects.filter(ticket=ticket).applied().first()
    assert applied is not None, statuses
    assert statuses.index("low_gain") < statuses.index("applied")
    # Judged on an estimate (the summary is expected at half of what it replaces, 300 tokens at most): the
    # boundaries before it were expected to free less than the minimum, more at each; the run freed tokens.
    gains = [a.compaction.expected_gain for a in answers if a.compaction.status == "low_gain"]
    assert all(g is not None and 0 <= g < 200 for g in gains), gains
    assert applied.tokens_before > applied.tokens_after
    # Later ones plan with the summary they carry forward, and each frees the minimum: not one per boundary.
    later = list(CompactionEvent.objects.filter(ticket=ticket).applied().order_by("number"))[1:]
    assert later and all(e.tokens_before - e.tokens_after >= 200 for e in later)
    assert len(later) + 1 < statuses.count("low_gain")


def test_a_state_that_leaves_too_little_room_is_said_in_the_answer_and_on_the_queue(sam: Client) -> None:
    crowded, roomy = ticket_of("T-CROWDED"), ticket_of("T-ROOMY")
    fill_state(crowded, 1300)  # leaves about 300 of the 1600-token threshold: at most ~150 freed there, < 200
    fill_state(roomy, 400)
    answers = talk(crowded, stop=1600, chars=40)
    boundary = next(a for a in answers if a.turn.boundary and a.context_tokens > 1600)
    answer = boundary.as_json()["compaction"]

    assert answer["status"] == "low_gain"
    assert answer["state_crowded"] is True
    assert "pinned state leaves too little room" in answer["reason"]
    assert "hard ceiling" in answer["reason"]
    # Every due answer of the stretch says it, whatever the policy did with the turn.
    due = [a for a in answers if a.context_tokens > 1600]
    assert all(a.as_json()["compaction"].get("state_crowded") for a in due)

    html = sam.get("/").content.decode()
    assert "state crowded" in html[html.index("T-CROWDED") :].split("</tr>")[0]
    assert "state crowded" not in html[html.index("T-ROOMY") :].split("</tr>")[0]


def test_the_hard_ceiling_still_compacts_when_no_compaction_pays() -> None:
    """Half the budget as the minimum: nothing pays before the budget, and past it the ceiling compacts anyway."""
    ticket = ticket_of("T-CEILING", min_gain_share=0.5)
    fill_state(ticket, 1300)
    answers = talk(ticket, pairs=60, chars=40)  # past the budget, more than once
    over = [a for a in answers if a.compaction.status in ("applied", "forced")]
    assert over, [a.compaction.status for a in answers]
    assert all(a.compaction.status != "low_gain" for a in over)
    first = over[0]
    event = first.compaction.event
    assert event is not None and event.tokens_before > 2000  # only past the budget
    assert all(a.context_tokens <= 2000 for a in answers if a.compaction.status in ("applied", "forced"))
    assert any(a.compaction.status == "low_gain" for a in answers)


def test_the_turn_answer_over_the_api_carries_the_low_gain_figures() -> None:
    ticket = ticket_of("T-API", keep_recent_tokens=1500)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='agent-gain')}")
    url = f"/api/v1/tickets/{ticket.ticket_id}/turns/"
    answers: list[dict[str, Any]] = []
    while len(answers) < 100 and (not answers or answers[-1]["context_tokens"] <= 1600):
        client.post(url, {"role": "customer", "content": (WORDS * 5)[:300]}, format="json")
        response = client.post(
            url, {"role": "agent", "content": "Checking.", "boundary": "reply_sent"}, format="json"
        )
        assert response.status_code == 201, response.content
        answers.append(response.json())
    compaction = answers[-1]["compaction"]
    assert compaction["status"] == "low_gain", compaction
    assert set(compaction) >= {"status", "reason", "expected_gain", "min_gain"}
