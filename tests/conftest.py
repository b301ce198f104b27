from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from tests.factories import supervisor
from tickets.models import Ticket, TicketClass
from tickets.served_state import ACTION_TEXTS
from tickets.services.lifecycle import open_ticket

REPO = Path(settings.BASE_DIR)
SCENARIO = REPO / "demo" / "T-40118.json"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    vendor = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" in vendor:
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://... (CI does)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_action_texts() -> None:
    """Each test starts with no actions' texts held: a test's rolled-back database may give the next test's state
    the same primary key and version (SQLite reuses keys), which a running desk never sees."""
    ACTION_TEXTS.clear()


@pytest.fixture
def scenario() -> dict[str, Any]:
    return json.loads(SCENARIO.read_text())


@pytest.fixture
def standard_class(db: None) -> TicketClass:
    return TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)


@pytest.fixture
def ticket(standard_class: TicketClass) -> Ticket:
    return open_ticket(
        ticket_id="T-1", order_id="SU-1", seller_type="marketplace", ticket_class=standard_class
    )


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture
def openai_server(monkeypatch: pytest.MonkeyPatch):
    """Start a scripted OpenAI-compatible server on loopback and point the client at it.

    Usage: `with openai_server([Reply(content=...), ...]) as fake: ...`
    """
    from contextlib import contextmanager

    from tests.fake_openai import serve

    @contextmanager
    def start(replies, *, repeat_last: bool = True):
        with serve(replies, repeat_last=repeat_last) as fake:
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
            yield fake

    return start


@pytest.fixture(autouse=True)
def _demo_token_file(settings: Any, tmp_path: Path) -> None:
    """`load_demo` keeps the demo agent's token in a file: a test's, never the developer's var/."""
    settings.SUNDRY_DEMO_TOKEN_FILE = str(tmp_path / "demo-agent-token")


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """No test inherits another's cached values (throttles, compiled reads)."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def sam(client: Client) -> Client:
    """A client logged in as sam, the supervisor."""
    client.force_login(supervisor())
    return client


@pytest.fixture(scope="session")
def local_model_server(tmp_path_factory: pytest.TempPathFactory):
    """The real local model (SmolLM2-135M behind llama-cpp-python's server) on a free loopback port, once per
    session. Skipped with the reason when the `model` group is not installed; SUNDRY_REQUIRE_MODEL=1 (CI) makes
    that a failure instead."""
    import os

    from evals.local_model import LocalModelUnavailable, serve

    log = tmp_path_factory.mktemp("model") / "server.log"
    try:
        with serve(log=log) as model:
            yield model
    except LocalModelUnavailable as exc:
        if os.environ.get("SUNDRY_REQUIRE_MODEL") == "1":
            pytest.fail(f"SUNDRY_REQUIRE_MODEL=1 and the local model is unavailable: {exc}")
        pytest.skip(f"the local model is unavailable: {exc}")


@pytest.fixture
def local_model(local_model_server, monkeypatch: pytest.MonkeyPatch):
    """The local model server, with the official client pointed at it for this test."""
    for name, value in local_model_server.env().items():
        monkeypatch.setenv(name, value)
    return local_model_server
