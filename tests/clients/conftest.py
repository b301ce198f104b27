"""A live desk (pytest-django's `live_server`) and clients that talk to it over real HTTP.

The client is a separate distribution (clients/python); it is imported from its source tree, which the
root pyproject also puts on pytest's `pythonpath`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.urls import get_resolver

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(CLIENT_SRC) not in sys.path:
    sys.path.insert(0, str(CLIENT_SRC))

from django.contrib.auth.models import Group  # noqa: E402
from sundry_desk_client import DeskClient  # noqa: E402

from tickets.accounts import ADMIN, AGENT, SUPERVISOR, create_agent  # noqa: E402
from tickets.models import TicketClass  # noqa: E402

# The Agents SDK runs its own event loop in the test thread; the tests touch the ORM only outside it.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def has_route(name: str) -> bool:
    """Whether the desk's URLconf has a route of this name (endpoints that land in another branch)."""
    return name in get_resolver().reverse_dict


needs_intents = pytest.mark.skipif(
    not has_route("api-action"),
    reason="waits for PATCH /api/v1/tickets/{id}/actions/{action_id}/ (route api-action: intents)",
)
needs_history = pytest.mark.skipif(
    not has_route("api-history"),
    reason="waits for GET /api/v1/tickets/{id}/history/ (route api-history)",
)


@pytest.fixture
def desk_token(transactional_db: None) -> str:
    # A transactional test database is flushed after each test, taking the roles' groups with it.
    for role in (AGENT, SUPERVISOR, ADMIN):
        Group.objects.get_or_create(name=role)
    return create_agent(name="agent-runtime")


@pytest.fixture
def desk_url(live_server: Any) -> str:
    return str(live_server.url)


@pytest.fixture
def client(desk_url: str, desk_token: str) -> Iterator[DeskClient]:
    with DeskClient(desk_url, desk_token, backoff=0.01, max_backoff=0.05) as desk:
        yield desk


@pytest.fixture
def standard_class(transactional_db: None) -> TicketClass:
    return TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)


@pytest.fixture
def small_class(transactional_db: None) -> TicketClass:
    """A class small enough that a few exchanges make compaction due (extractive summarizer, offline)."""
    return TicketClass.objects.create(
        slug="small-1k", token_budget=1000, compaction_threshold=0.6, keep_recent_tokens=150
    )


def open_t40118(client: DeskClient, *, ticket_class: str = "standard-8k", ticket_id: str = "T-40118") -> str:
    client.open_ticket(ticket_id, order_id="SU-87310", seller_type="marketplace", ticket_class=ticket_class)
    return ticket_id


def run_async[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in a thread of its own: Playwright's sync API (the browser tests) may have left an
    event loop running in the test thread of the same worker, where asyncio.run refuses to start."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
