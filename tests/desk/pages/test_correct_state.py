"""Inline state correction: a reason is required, the version is checked, every change is audited."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.vocabulary import ActorKind, StateOp
from tests.browser.desk_data import import_t40118, supervisor
from tickets.models import PinnedState, StateChange, Ticket
from tickets.services.state_changes import change_state

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture
def sam() -> User:
    return supervisor()


@pytest.fixture
def t40118(scenario: dict) -> Ticket:
    return import_t40118(scenario)


@pytest.fixture
def logged_in(client: Client, sam: User) -> Client:
    client.force_login(sam)
    return client


def post(client: Client, ticket: Ticket, htmx: bool = True, **data: object):
    headers = HTMX if htmx else {}
    return client.post(f"/tickets/{ticket.ticket_id}/state/", data, headers=headers)


def test_adding_a_missed_action_is_saved_with_the_reason_and_shown_in_the_audit_trail(
    logged_in: Client, t40118: Ticket, sam: User
) -> None:
    response = post(
        logged_in,
        t40118,
        op="action_added",
        expected_version=4,
        tool="book_return",
        item="patio-parasol",
        amount="0",
        at_turn=24,
        reason="The return label was sent by phone; the agent never recorded it.",
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="state-panel"')  # the fragment only
    assert "Correction saved" in html and "v5" in html
    change = StateChange.objects.get(ticket=t40118, to_version=5)
    assert (change.op, change.actor_kind, change.actor, change.from_version) == (
        StateOp.ACTION_ADDED,
        ActorKind.SUPERVISOR,
        sam,
        4,
    )
    assert change.reason.startswith("The return label")
    audit = html[html.index("Audit trail") :]
    assert (
        "sam" in audit
        and "Missed action added" in audit
        and "v4→v5" in audit
        and "never recorded it" in audit
    )
    assert "stateCorrected" in response["HX-Trigger"]


def test_a_reason_is_required(logged_in: Client, t40118: Ticket) -> None:
    response = post(
        logged_in, t40118, op="constraint_stated", expected_version=4, text="only email", reason="  "
    )
    assert response.status_code == 422
    assert "A reason is required for every correction." in response.content.decode()
    assert PinnedState.objects.get(ticket=t40118).version == 4
    assert not StateChange.objects.filter(ticket=t40118, actor_kind=ActorKind.SUPERVISOR).exists()


def test_a_stale_correction_is_refused_and_the_newer_state_is_shown(
    logged_in: Client, t40118: Ticket
) -> None:
    """The form was rendered at v4; the agent pinned a constraint (v5) before the supervisor saved."""
    change_state(op="constraint_stated", ticket=t40118, text="only contact by email", at_turn=25)
    response = post(
        logged_in,
        t40118,
        op="constraint_stated",
        expected_version=4,
        text="no weekday pickups",
        reason="Customer said so on the phone.",
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "Refused: the state changed while you were editing." in html
    assert "made against version 4; the state is now at version 5" in html
    assert "only contact by email" in html  # the newer state is shown
    assert "Constraint stated by" in html
    assert 'name="expected_version" value="5"' in html  # the form now carries the version just shown
    assert "no weekday pickups" in html  # what the supervisor typed is kept
    assert PinnedState.objects.get(ticket=t40118).version == 5
    assert not StateChange.objects.filter(ticket=t40118, actor_kind=ActorKind.SUPERVISOR).exists()


def test_marking_the_refund_reversed_drops_it_from_the_refunded_total(
    logged_in: Client, t40118: Ticket
) -> None:
    response = post(
        logged_in,
        t40118,
        op="action_reversed",
        expected_version=4,
        target_id="A1",
        reason="Payment provider reversed rf_5521.",
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "Refunded total <b>$0.00</b>" in html and 'class="reversed"' in html
    assert PinnedState.objects.get(ticket=t40118).items.actions_taken[0].reversed


def test_editing_a_constraint_and_resolving_a_question(logged_in: Client, t40118: Ticket) -> None:
    edited = post(
        logged_in,
        t40118,
        op="constraint_edited",
        expected_version=4,
        target_id="C1",
        text="no replacement and no store credit",
        reason="Clarified with the customer.",
    )
    assert edited.status_code == 200
    resolved = post(
        logged_in,
        t40118,
        op="question_resolved",
        expected_version=5,
        target_id="Q1",
        reason="Photo received by email.",
    )
    assert resolved.status_code == 200
    state = PinnedState.objects.get(ticket=t40118)
    assert state.version == 6
    assert state.items.customer_constraints[0].text == "no replacement and no store credit"
    assert state.items.open_questions == []


def test_a_correction_naming_no_item_is_refused_with_the_service_message(
    logged_in: Client, t40118: Ticket
) -> None:
    response = post(
        logged_in, t40118, op="action_reversed", expected_version=4, target_id="A9", reason="typo"
    )
    assert response.status_code == 422
    assert "no action &#x27;A9&#x27; on this ticket" in response.content.decode()


def test_without_htmx_a_saved_correction_redirects_to_the_ticket(logged_in: Client, t40118: Ticket) -> None:
    response = post(
        logged_in,
        t40118,
        htmx=False,
        op="constraint_stated",
        expected_version=4,
        text="only email",
        reason="Phone call.",
    )
    assert response.status_code == 302
    assert response["Location"] == "/tickets/T-40118/#state"
    invalid = post(
        logged_in, t40118, htmx=False, op="constraint_stated", expected_version=5, text="x", reason=""
    )
    assert invalid.status_code == 422
    assert "<html" in invalid.content.decode()


def test_a_get_is_not_allowed(logged_in: Client, t40118: Ticket) -> None:
    assert logged_in.get(f"/tickets/{t40118.ticket_id}/state/").status_code == 405
