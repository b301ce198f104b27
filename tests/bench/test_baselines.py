"""The baselines do the desk's work: R' (bench/raw_writes.py) writes what the desk writes, so the desk reads its
intents and settles back as its own; PS serves the state the desk serves; the queue fill's rows are valid states.
PostgreSQL (R' runs its own psycopg connection, so these tests commit)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.renderers import JSONRenderer

from bench import raw_app
from bench.queue_fill import fill_queue, insert_select
from compaction.models import CompactionEvent
from core.state import StateItems, agent_state
from tests.factories import ensure_roles
from tickets.accounts import create_agent
from tickets.models import PinnedState, StateChange, Ticket, TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket


def _call(
    path: str, method: str, token: str, body: dict[str, Any] | None = None, key: str = ""
) -> tuple[str, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    environ = {
        "PATH_INFO": path,
        "REQUEST_METHOD": method,
        "HTTP_AUTHORIZATION": f"Token {token}",
        "HTTP_IDEMPOTENCY_KEY": key,
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
    }
    seen: list[str] = []
    chunks = raw_app.app(environ, lambda status, headers: seen.append(status))
    return seen[0], json.loads(b"".join(chunks))


@pytest.fixture
def raw_dsn(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    db = settings.DATABASES["default"]
    dsn = f"host={db['HOST'] or 'localhost'} port={db['PORT'] or 5432} dbname={db['NAME']} user={db['USER']} password={db['PASSWORD']}"
    monkeypatch.setenv("BENCH_RAW_DSN", dsn)
    monkeypatch.setattr(raw_app, "_connection", None)
    yield
    if raw_app._connection is not None:
        raw_app._connection.close()
        raw_app._connection = None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_rprime_writes_what_the_desk_reads_back_as_its_own(raw_dsn: None) -> None:
    ensure_roles()  # an earlier transactional test on this worker may have flushed the migration's groups
    klass = TicketClass.objects.create(slug="roomy", token_budget=2_000_000_000, compaction_threshold=1.0)
    open_ticket(
        ticket_id="T\u2011R1", order_id="SU-1", seller_type="marketplace", ticket_class=klass
    )  # U+2011
    token = create_agent(name="bench-agent")
    base = "/api/v1/tickets/T\u2011R1"
    assert _call(f"{base}/state/", "GET", "not-a-real-token-at-all")[0].startswith("401")
    status, turn = _call(f"{base}/turns/", "POST", token, {"role": "customer", "content": "hello there"})
    assert status.startswith("201") and turn["turn"] == 1
    status, done = _call(
        f"{base}/actions/", "POST", token, {"tool": "issue_refund", "item": "a", "amount_cents": 100}, "k1"
    )
    assert status.startswith("201") and done["refunded_cents_total"] == 100
    assert (
        _call(
            f"{base}/actions/",
            "POST",
            token,
            {"tool": "issue_refund", "item": "a", "amount_cents": 100},
            "k1",
        )[1]
        == done
    )
    status, refused = _call(
        f"{base}/actions/", "POST", token, {"tool": "issue_refund", "item": "a", "amount_cents": 100}, "k2"
    )
    assert status.startswith("409") and refused["error"] == "repeat_refused"
    status, intent = _call(
        f"{base}/actions/",
        "POST",
        token,
        {"tool": "issue_refund", "item": "b", "amount_cents": 50, "status": "intended"},
        "k3",
    )
    assert status.startswith("201") and intent["action"]["status"] == "intended"
    assert intent["refunded_cents_total"] == 100  # an intent moves no money yet
    status, settled = _call(
        f"{base}/actions/{intent['action']['id']}/", "PATCH", token, {"status": "succeeded"}
    )
    assert status.startswith("200") and settled["refunded_cents_total"] == 150
    assert _call(f"{base}/actions/A9/", "PATCH", token, {"status": "succeeded"})[0].startswith("404")

    # The desk reads R''s rows as its own: the state validates, the audit log and the turn are there.
    desk = Client(HTTP_AUTHORIZATION=f"Token {token}")
    state = desk.get(f"{base}/state/").json()
    assert [(a["id"], a["status"]) for a in state["actions_taken"]] == [
        ("A1", "succeeded"),
        ("A2", "succeeded"),
    ]
    assert state["refunded_cents_total"] == 150 and state["version"] == settled["state_version"]
    # R' kept the served texts as the desk does: the state read past DRF is the validated items, byte for byte.
    served = desk.get(f"{base}/state/")
    assert not hasattr(served, "data"), "the desk did not find R''s served texts current"
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket__ticket_id="T\u2011R1")
    expected = agent_state(ticket="T\u2011R1", order="SU-1", seller_type="marketplace", version=pinned.version,
                           items=StateItems.load(pinned.data, tools=pinned.ticket.ticket_class.tool_catalog))  # fmt: skip
    assert served.content == JSONRenderer().render(expected)
    ticket = Ticket.objects.get(ticket_id="T\u2011R1")
    ops = list(StateChange.objects.filter(ticket=ticket).order_by("id").values_list("op", flat=True))
    assert ops == ["opened", "action_taken", "action_intended", "action_settled"]
    assert Turn.objects.filter(ticket=ticket).count() == 1 and ticket.turn_count == 1


@pytest.mark.postgres
@pytest.mark.django_db
def test_ps_serves_the_state_and_context_the_desk_serves() -> None:
    klass = TicketClass.objects.create(slug="roomy", token_budget=8000, compaction_threshold=0.8)
    ticket = open_ticket(ticket_id="T-PS", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    record_action(ticket=ticket, tool="issue_refund", item="x", amount_cents=100, idempotency_key="k")
    token = create_agent(name="bench-agent")
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(settings, "ROOT_URLCONF", "bench.urls")
        desk = client.get("/api/v1/tickets/T-PS/state/").json()
        ps = client.get("/ps/tickets/T-PS/state/").json()
        desk_context = client.get("/api/v1/tickets/T-PS/context/").json()
        ps_context = client.get("/ps/tickets/T-PS/context/").json()
        assert client.get("/ps/tickets/T-NONE/state/").status_code == 404
    assert ps == desk
    assert ps_context["pinned_state"] == desk_context["pinned_state"]
    assert (
        ps_context["turns"] == desk_context["turns"]
        and ps_context["tokens"]["total"] == desk_context["tokens"]["total"]
    )


def test_the_fill_names_every_column_or_gives_its_default_and_refuses_an_unknown_one() -> None:
    sql, _ = insert_select(
        Turn, {"ticket_id": "t.id", "number": "1", "role": "'customer'", "tokens": "3"}, "FROM x t"
    )
    assert sql.startswith("INSERT INTO tickets_turn (") and " SELECT " in sql and sql.endswith("FROM x t")
    assert "posted_by_id" in sql and "now()" in sql  # a nullable foreign key, an auto timestamp
    with pytest.raises(RuntimeError, match="no column"):
        insert_select(
            Turn, {"ticket_id": "t.id", "number": "1", "role": "'c'", "tokens": "3", "nope": "1"}, ""
        )
    with pytest.raises(RuntimeError, match="has no default"):
        insert_select(Turn, {"number": "1", "role": "'c'", "tokens": "3"}, "")


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_queue_fill_makes_tickets_whose_states_turns_and_events_the_desk_reads() -> None:
    fill_queue(120, lambda line: None)
    assert Ticket.objects.count() == 120
    assert Turn.objects.count() == 240
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket__ticket_id="Q-0000007")
    state = pinned.agent_json()  # validated through the desk's own model
    assert [
        len(state[k]) for k in ("actions_taken", "customer_constraints", "open_questions", "decisions")
    ] == [1, 1, 1, 1]
    assert (
        CompactionEvent.objects.filter(ticket__ticket_id__startswith="Q-").count() == 12
    )  # one ticket in ten
