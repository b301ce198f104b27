"""The permissions matrix of SPEC section 1, end to end: who may do what, through which door."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import Client
from rest_framework.test import APIClient

from compaction.models import CompactionEvent, ContextSnapshot
from tests.factories import import_t40118
from tickets.accounts import create_agent, create_person
from tickets.models import PinnedState, StateChange, Ticket, TicketClass, Turn

pytestmark = pytest.mark.django_db

PASSWORD = "matrix-password-123"


@pytest.fixture
def t40118(scenario: dict[str, Any]) -> Ticket:
    return import_t40118(scenario)


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def agent_api() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='bot')}")
    return client


def correction(ticket: Ticket) -> dict[str, str]:
    return {
        "op": "constraint_stated",
        "text": "email only",
        "reason": "said on the phone",
        "expected_version": str(PinnedState.objects.get(ticket=ticket).version),
    }


def test_an_agent_cannot_use_the_pages_nor_correct_the_state(t40118: Ticket) -> None:
    create_agent(name="bot-2")
    agent = User.objects.get(username="bot-2")
    pages = browser(agent)
    for path in (
        "/",
        f"/tickets/{t40118.ticket_id}/",
        f"/tickets/{t40118.ticket_id}/compactions/2/",
        "/metrics/",
    ):
        assert pages.get(path).status_code == 403, path
    version = PinnedState.objects.get(ticket=t40118).version
    assert pages.post(f"/tickets/{t40118.ticket_id}/state/", correction(t40118)).status_code == 403
    assert PinnedState.objects.get(ticket=t40118).version == version
    assert not pages.login(
        request=HttpRequest(), username="bot-2", password=""
    )  # an unusable password: no session at all


def test_a_supervisor_corrects_the_state_but_cannot_change_budgets(t40118: Ticket) -> None:
    sue = browser(create_person(username="sue", password=PASSWORD, role="supervisor"))
    response = sue.post(f"/tickets/{t40118.ticket_id}/state/", correction(t40118))
    assert response.status_code in (200, 302)
    assert StateChange.objects.filter(
        ticket=t40118, actor__username="sue", reason="said on the phone"
    ).exists()
    klass = TicketClass.objects.get(slug="standard-8k")
    assert sue.get("/classes/").status_code == 403
    budget_edit = sue.post(f"/admin/tickets/ticketclass/{klass.pk}/change/", {"token_budget": "1"})
    assert budget_edit.status_code == 302 and "/admin/login/" in budget_edit["Location"]
    assert TicketClass.objects.get(pk=klass.pk).token_budget == 8000


def test_a_supervisor_reads_the_api_but_does_not_write_through_it(t40118: Ticket) -> None:
    sue = APIClient()
    sue.force_login(create_person(username="sue", password=PASSWORD, role="supervisor"))
    assert sue.get(f"/api/v1/tickets/{t40118.ticket_id}/state/").status_code == 200
    response = sue.post(
        f"/api/v1/tickets/{t40118.ticket_id}/turns/", {"role": "agent", "content": "hi"}, format="json"
    )
    assert response.status_code == 403
    assert Turn.objects.filter(ticket=t40118).count() == 26


def test_only_agents_write_through_the_api(t40118: Ticket) -> None:
    response = agent_api().post(
        f"/api/v1/tickets/{t40118.ticket_id}/turns/", {"role": "agent", "content": "hi"}, format="json"
    )
    assert response.status_code == 201


def test_an_admin_changes_budgets_but_nobody_deletes_history(t40118: Ticket) -> None:
    ada = browser(create_person(username="ada", password=PASSWORD, role="admin"))
    assert ada.get("/classes/").status_code == 200
    event = CompactionEvent.objects.get(ticket=t40118, status="applied")
    targets = {
        "turn": f"/admin/tickets/turn/{Turn.objects.filter(ticket=t40118).first().pk}/delete/",
        "audit row": f"/admin/tickets/statechange/{StateChange.objects.filter(ticket=t40118).first().pk}/delete/",
        "pinned state (its actions)": f"/admin/tickets/pinnedstate/{PinnedState.objects.get(ticket=t40118).pk}/delete/",
        "compaction event": f"/admin/compaction/compactionevent/{event.pk}/delete/",
        "snapshot": f"/admin/compaction/contextsnapshot/{ContextSnapshot.objects.get(event=event).pk}/delete/",
    }
    for what, path in targets.items():
        assert ada.post(path, {"post": "yes"}).status_code == 403, what
    assert Turn.objects.filter(ticket=t40118).count() == 26
    assert ContextSnapshot.objects.filter(event=event).exists()
    assert len(PinnedState.objects.get(ticket=t40118).items.actions_taken) == 1


# The whole matrix: every address on this branch, every kind of caller. Writes are sent with an empty body,
# so a caller who is let through gets a validation answer (400/428) and nothing changes.
T = "T-40118"
API_READS = [f"/api/v1/tickets/{T}/{what}" for what in ("", "state/", "context/", "compactions/", "history/")]
API_WRITES = [
    ("post", "/api/v1/tickets/"),
    ("patch", f"/api/v1/tickets/{T}/"),
    ("post", f"/api/v1/tickets/{T}/turns/"),
    ("post", f"/api/v1/tickets/{T}/state/"),
    ("post", f"/api/v1/tickets/{T}/actions/"),
    ("patch", f"/api/v1/tickets/{T}/actions/A1/"),
]
PAGES = [
    "/",
    "/metrics/",
    "/metrics.csv",
    "/reviews/next/",
    f"/tickets/{T}/",
    f"/tickets/{T}/export.json",
    f"/tickets/{T}/replay/?turn=10",
    f"/tickets/{T}/compactions/2/",
]
PAGE_WRITES = [f"/tickets/{T}/state/", f"/tickets/{T}/status/"]
PUBLIC = ["/api/v1/docs/", "/api/v1/schema/", "/accounts/login/"]


def callers() -> dict[str, Client]:
    nobody = Client()
    nobody.force_login(User.objects.create_user(username="no-role", password=PASSWORD))
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Token {create_agent(name='matrix-bot')}")
    return {
        "anonymous": Client(),
        "no role": nobody,
        "agent": agent,
        "supervisor": browser(create_person(username="sup", password=PASSWORD, role="supervisor")),
        "admin": browser(create_person(username="adm", password=PASSWORD, role="admin")),
    }


def test_the_whole_matrix_of_addresses_and_callers(t40118: Ticket) -> None:
    version, turns = (
        PinnedState.objects.get(ticket=t40118).version,
        Turn.objects.filter(ticket=t40118).count(),
    )
    who = callers()
    seen: dict[tuple[str, str, str], int] = {}
    for name, client in who.items():
        for path in API_READS:
            seen[(name, "GET", path)] = client.get(path).status_code
        for method, path in API_WRITES:
            seen[(name, method.upper(), path)] = getattr(client, method)(
                path, {}, content_type="application/json"
            ).status_code
        for path in [*PAGES, "/classes/", "/admin/tickets/agenttoken/"]:
            seen[(name, "GET", path)] = client.get(path).status_code
        for path in PAGE_WRITES:
            seen[(name, "POST", path)] = client.post(path, {}).status_code
        for path in PUBLIC:
            seen[(name, "GET", path)] = client.get(path).status_code

    def expect(name: str, method: str, path: str) -> set[int]:
        reads_api = name in ("agent", "supervisor", "admin")
        people = name in ("supervisor", "admin")
        if path in PUBLIC:
            return {200}
        if path.startswith("/api/"):
            if name == "anonymous":
                return {401}
            if method == "GET":
                return {200} if reads_api else {403}
            return {400, 428} if name == "agent" else {403}
        if path.startswith("/admin/"):
            return {200} if name == "admin" else {302}  # staff only: others are sent to the admin login
        if name in ("anonymous", "agent"):
            return {302}  # to the login page: an API token is no credential for the pages
        if path == "/classes/":
            return {200} if name == "admin" else {403}
        if path == "/reviews/next/":
            return {302} if people else {403}  # people are sent on to the next unreviewed compaction
        if method == "POST":
            return {200, 302, 400, 422} if people else {403}  # an empty form is refused, not saved
        return {200} if people else {403}

    wrong = {key: status for key, status in seen.items() if status not in expect(*key)}
    assert wrong == {}
    assert PinnedState.objects.get(ticket=t40118).version == version
    assert Turn.objects.filter(ticket=t40118).count() == turns
