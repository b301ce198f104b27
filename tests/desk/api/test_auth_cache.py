"""The token lookup is a compiled read, kept per process for SUNDRY_AUTH_CACHE_SECONDS: a request inside that
time reads no token row; a token revoked elsewhere (another process: here, a row update this process does not
see) is refused once that time has passed. The clock is set, not slept on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from tests.desk.api.conftest import url
from tickets.accounts import TOKEN_CACHE, authenticate_agent_token, revoke_agent_tokens, token_digest
from tickets.models import AgentToken, Ticket

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(settings: object) -> Iterator[Clock]:
    settings.SUNDRY_AUTH_CACHE_SECONDS = 5  # type: ignore[attr-defined]
    clock, kept = Clock(), TOKEN_CACHE.clock
    TOKEN_CACHE.clock = clock
    TOKEN_CACHE.clear()
    yield clock
    TOKEN_CACHE.clock = kept
    TOKEN_CACHE.clear()


def _token_queries(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "tickets_agenttoken" in q["sql"]]


def revoke_elsewhere(key: str) -> None:
    """What another worker's revocation looks like from here: the row changes, this process's cache does not."""
    AgentToken.objects.filter(digest=token_digest(key)).update(revoked_at=timezone.now())


def test_a_cached_token_is_authenticated_with_no_query(agent_token: str, clock: Clock) -> None:
    first = authenticate_agent_token(key=agent_token)
    assert first is not None and first.roles.agent
    with CaptureQueriesContext(connection) as queries:
        again = authenticate_agent_token(key=agent_token)
    assert again is not None and again.user.username == "agent-smith" and again.roles.agent
    assert queries.captured_queries == []


def test_a_request_within_the_cache_reads_no_token_row(
    agent: APIClient, ticket: Ticket, clock: Clock
) -> None:
    assert agent.get(url(ticket, "state")).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert agent.get(url(ticket, "state")).status_code == 200
    assert _token_queries(queries) == []
    assert len(queries.captured_queries) == 1  # the state with its ticket, and nothing for the token


def test_a_token_revoked_elsewhere_is_refused_once_the_cache_time_has_passed(
    agent: APIClient, agent_token: str, ticket: Ticket, clock: Clock
) -> None:
    assert agent.get(url(ticket, "state")).status_code == 200
    revoke_elsewhere(agent_token)
    clock.now += 4.9
    assert agent.get(url(ticket, "state")).status_code == 200  # within the documented seconds
    clock.now += 0.1
    refused = agent.get(url(ticket, "state"))
    assert refused.status_code == 401
    assert refused.json()["message"] == "invalid or revoked token"
    clock.now += 60
    assert agent.get(url(ticket, "state")).status_code == 401  # a refusal is never cached as a pass


def test_a_revocation_in_this_process_is_honoured_at_once(
    agent: APIClient, agent_token: str, ticket: Ticket, clock: Clock
) -> None:
    assert agent.get(url(ticket, "state")).status_code == 200
    assert revoke_agent_tokens(username="agent-smith") == 1
    assert agent.get(url(ticket, "state")).status_code == 401


def test_a_user_deactivated_or_taken_out_of_the_agents_is_seen_at_once_in_this_process(
    agent: APIClient, agent_token: str, ticket: Ticket, clock: Clock
) -> None:
    assert (
        agent.post(url(ticket, "turns"), {"role": "customer", "content": "hi"}, format="json").status_code
        == 201
    )
    found = authenticate_agent_token(key=agent_token)
    assert found is not None
    user = found.user
    user.groups.clear()
    assert (
        agent.post(url(ticket, "turns"), {"role": "customer", "content": "x"}, format="json").status_code
        == 403
    )
    user.is_active = False
    user.save()
    assert agent.get(url(ticket, "state")).status_code == 401


def test_with_no_cache_seconds_every_request_reads_the_token(
    agent: APIClient, ticket: Ticket, clock: Clock, settings: object
) -> None:
    settings.SUNDRY_AUTH_CACHE_SECONDS = 0  # type: ignore[attr-defined]
    agent.get(url(ticket, "state"))
    with CaptureQueriesContext(connection) as queries:
        assert agent.get(url(ticket, "state")).status_code == 200
    assert len(_token_queries(queries)) == 1
    assert len(TOKEN_CACHE) == 0


def test_the_token_read_is_compiled_once_and_keeps_its_three_roles_in_one_query(
    agent_token: str, clock: Clock, settings: object
) -> None:
    settings.SUNDRY_AUTH_CACHE_SECONDS = 0  # type: ignore[attr-defined]
    with CaptureQueriesContext(connection) as queries:
        found = authenticate_agent_token(key=agent_token)
    assert found is not None and found.roles.names == {"agent"}
    (sql,) = [q["sql"] for q in queries.captured_queries if "SELECT" in q["sql"]]
    assert sql.count("EXISTS") == 3
    assert authenticate_agent_token(key=agent_token[:-1] + ("A" if agent_token[-1] != "A" else "B")) is None
