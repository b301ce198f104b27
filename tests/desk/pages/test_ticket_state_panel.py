"""The ticket page's pinned-state panel is bounded: however many actions the state holds, it draws the
open intents and failed ones, the newest ACTIONS_SHOWN whole, counts the rest and links to all of them;
its totals are the whole state's; the correction form takes an action by id."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.fixtures import grow_state
from desk.pages.ticket import PINS_PER_TURN
from desk.pages.ticket.actions import (
    ACTION_TARGETS_SHOWN,
    ACTIONS_SHOWN,
    action_list,
    action_targets,
    inline_state_json,
)
from tests.desk.pages.test_ticket_detail import DETAIL_QUERIES
from tests.factories import long_ticket
from tickets.models import PinnedState, Ticket
from tickets.services.actions import record_action

pytestmark = pytest.mark.django_db


def grown(ticket_id: str, actions: int) -> Ticket:
    """40 turns, then an open intent (A1) and `actions` - 1 refunds of $1 (bench.fixtures.grow_state), all
    pinned from the newest turn."""
    ticket = long_ticket(ticket_id, 40)
    record_action(
        ticket=ticket,
        tool="issue_refund",
        item="old-intent",
        amount_cents=500,
        idempotency_key="i",
        status="intended",
    )
    grow_state(ticket, actions)
    return Ticket.objects.get(pk=ticket.pk)


def panel(html: str) -> str:
    start = html.index('<section id="state-panel"')
    return html[start : html.index("</section>", start)]


def drawn_actions(html: str) -> list[str]:
    return re.findall(r'<li data-item="(A\d+)"', panel(html))


# ---------------------------------------------------------------- which actions, as plain data


def action(n: int, **fields: Any) -> dict[str, Any]:
    return {"id": f"A{n}", "tool": "issue_refund", "item": f"i-{n}", "amount_cents": 100, **fields}


def test_a_small_state_is_listed_whole_and_its_json_inlined() -> None:
    state = {"actions_taken": [action(n) for n in range(1, 4)]}
    shown = action_list(state)
    assert [a["id"] for a in shown.newest] == ["A1", "A2", "A3"]
    assert (shown.total, shown.not_drawn, shown.older_worth_a_look) == (3, 0, [])
    assert inline_state_json(state)


def test_a_long_state_keeps_its_newest_and_older_intents_failures_and_repeats() -> None:
    actions = [action(n) for n in range(1, 501)]
    actions[2] = action(3, status="intended")
    actions[9] = action(10, status="failed", failure_reason="card declined")
    actions[19] = action(20, repeat_of="A1")
    actions[29] = action(30, status="intended", reversed=True)  # reversed: nothing left to settle
    state = {"actions_taken": actions}
    shown = action_list(state)
    assert [a["id"] for a in shown.newest] == [f"A{n}" for n in range(451, 501)]
    assert [a["id"] for a in shown.older_worth_a_look] == ["A3", "A10", "A20"]
    assert shown.not_drawn == 500 - ACTIONS_SHOWN - 3
    assert not inline_state_json(state)


def test_older_ones_worth_a_look_are_bounded_too() -> None:
    state = {"actions_taken": [action(n, status="intended") for n in range(1, 1001)]}
    shown = action_list(state, older=5)
    assert [a["id"] for a in shown.older_worth_a_look] == [f"A{n}" for n in range(946, 951)]
    assert shown.older_worth_a_look_not_drawn == 945
    assert shown.drawn == ACTIONS_SHOWN + 5


def test_the_correction_offers_the_newest_actions_not_reversed_by_id() -> None:
    actions = [action(n) for n in range(1, 301)]
    actions[-1] = action(300, reversed=True)
    targets = action_targets({"actions_taken": actions})
    assert len(targets) == ACTION_TARGETS_SHOWN
    assert targets[0] == ("A299", "A299 issue_refund i-299 $1.00")
    assert targets[-1][0] == f"A{299 - ACTION_TARGETS_SHOWN + 1}"


# ---------------------------------------------------------------- the page


def test_the_page_does_not_grow_with_the_number_of_actions(
    sam: Client, django_assert_num_queries: Any
) -> None:
    small, big = grown("T-A60", 60), grown("T-A600", 600)
    pages = {}
    for ticket in (small, big):
        with django_assert_num_queries(DETAIL_QUERIES):
            response = sam.get(f"/tickets/{ticket.ticket_id}/")
        assert response.status_code == 200
        pages[ticket.ticket_id] = response.content.decode()
    html_60, html_600 = pages["T-A60"], pages["T-A600"]
    # The same rows drawn: the open intent A1 and the newest ACTIONS_SHOWN.
    assert drawn_actions(html_60) == ["A1", *(f"A{n}" for n in range(11, 61))]
    assert drawn_actions(html_600) == ["A1", *(f"A{n}" for n in range(551, 601))]
    # The same size, to a few longer ids and counts (a state of 600 is ten times one of 60).
    assert len(html_600) < len(html_60) * 1.02
    assert len(PinnedState.objects.get(ticket=big).agent_json()["actions_taken"]) == 600


def test_a_long_state_counts_the_rest_and_links_to_every_action(sam: Client) -> None:
    ticket = grown("T-A600", 600)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    state = panel(html)
    assert "600 · the newest 50 and 1 older worth a look" in state
    assert re.search(r'data-item="A1"[^>]*>.*?open intent', state)
    assert "549 older actions not listed" in state
    assert f'href="/api/v1/tickets/{ticket.ticket_id}/state/"' in state
    assert f'href="/tickets/{ticket.ticket_id}/export.json"' in state
    # The agent-facing JSON is linked, not inlined.
    assert '<details class="json">' not in state and 'id="state-json"' in state
    # The totals are the whole state's: 599 refunds of $1 (the intent holds its $5, it moved nothing).
    assert "Refunded total <b>$599.00</b>" in state
    assert 'id="card-refunded"><dt>Refunded</dt><dd>$599.00' in html


def test_the_page_reads_the_agent_facing_state_not_the_stored_items(sam: Client) -> None:
    """A state of 600 actions is two JSON documents: the page reads the one it shows."""
    ticket = grown("T-A600", 600)
    table = PinnedState._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        assert sam.get(f"/tickets/{ticket.ticket_id}/").status_code == 200
    assert any(f'"{table}"' in q["sql"] for q in queries)
    assert not [q["sql"] for q in queries if f'"{table}"."data"' in q["sql"]]


def test_the_state_json_link_answers_a_supervisors_session(sam: Client) -> None:
    ticket = grown("T-A60", 60)
    response = sam.get(f"/api/v1/tickets/{ticket.ticket_id}/state/")
    assert response.status_code == 200
    assert len(response.json()["actions_taken"]) == 60


def test_a_turn_shows_a_few_of_its_pins_and_counts_the_rest(sam: Client) -> None:
    ticket = grown("T-A600", 600)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    start = html.index('id="turn-40"')
    turn = html[start : html.index("</li>", start)]
    assert turn.count('<span class="pin cat-actions_taken"') == PINS_PER_TURN
    assert f"and {600 - PINS_PER_TURN} more pinned from this turn" in turn
    line = html[html.rindex("<li", 0, start) : start]
    assert line.count("cat-actions_taken") == 1  # each category once on the turn's class


def test_the_reversal_takes_any_action_by_id_with_the_newest_suggested(sam: Client) -> None:
    ticket = grown("T-A600", 600)
    html = sam.get(f"/tickets/{ticket.ticket_id}/").content.decode()
    form = html[html.index('data-op="action_reversed"') :]
    form = form[: form.index("</form>")]
    assert "<select" not in form
    assert re.search(
        r'<input type="text" name="target_id"[^>]*list="id_action_reversed_target_id-options"', form
    )
    options = re.findall(r'<option value="(A\d+)">', form)
    assert options == [f"A{n}" for n in range(600, 600 - ACTION_TARGETS_SHOWN, -1)]
    version = PinnedState.objects.get(ticket=ticket).version
    # An old action, not among the suggestions, typed by its id.
    response = sam.post(
        f"/tickets/{ticket.ticket_id}/state/",
        {"op": "action_reversed", "expected_version": version, "target_id": "A3", "reason": "refunded twice"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    # The redrawn panel is as bounded as the page's: the intent and the newest (A3, reversed, is not drawn).
    assert drawn_actions(response.content.decode()) == ["A1", *(f"A{n}" for n in range(551, 601))]
    assert "549 older actions not listed" in response.content.decode()
    reversed_ = [a for a in PinnedState.objects.get(ticket=ticket).items.actions_taken if a.reversed]
    assert [a.id for a in reversed_] == ["A3"]
    # An id the state does not have is refused by the service, as before.
    response = sam.post(
        f"/tickets/{ticket.ticket_id}/state/",
        {"op": "action_reversed", "expected_version": version + 1, "target_id": "A601", "reason": "typo"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 422
    assert "no action &#x27;A601&#x27; on this ticket" in response.content.decode()
