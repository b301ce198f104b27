"""The baselines do the desk's work: R' (bench/raw_writes.py) writes what the desk writes, so the desk reads its
intents and settles back as its own; PS serves the state the desk serves; the queue fill's rows are valid states.
PostgreSQL (R' runs its own psycopg connection, so these tests commit)."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.renderers import JSONRenderer

from bench import raw_app
from bench.queue_fill import fill_queue, insert_select
from compaction.models import CompactionEvent
from core.identity import action_keys
from core.state import ActionFigures, agent_state, model_state
from core.state_text import action_texts
from core.tokens import state_tokens
from tests.factories import ensure_roles
from tickets.accounts import create_agent
from tickets.models import (
    IdempotencyRecord,
    PinnedState,
    StateAction,
    StateActionKey,
    StateChange,
    Ticket,
    TicketClass,
    Turn,
)
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


def _desk_call(
    desk: Client, path: str, method: str, body: dict[str, Any] | None = None, key: str = ""
) -> tuple[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    answer = getattr(desk, method.lower())(
        path, json.dumps(body or {}), content_type="application/json", headers=headers
    )
    return str(answer.status_code), answer.json()


# The requests both make, in order: a turn, an action, its retry, a refused repeat, an intent, its settle and
# that settle again, an unknown action's settle, a second intent, a payout about the whole order refused, the
# second intent's failure, an intent about the whole order (which reads every action, and stays open), and an
# action whose args name two items (two item keys).
STEPS: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("turns/", "POST", {"role": "customer", "content": "hello there"}, ""),
    ("actions/", "POST", {"tool": "issue_refund", "item": "a", "amount_cents": 100}, "k1"),
    ("actions/", "POST", {"tool": "issue_refund", "item": "a", "amount_cents": 100}, "k1"),
    ("actions/", "POST", {"tool": "issue_refund", "item": "a", "amount_cents": 100}, "k2"),
    ("actions/", "POST", {"tool": "issue_refund", "item": "b", "amount_cents": 50, "status": "intended"}, "k3"),
    ("actions/A2/", "PATCH", {"status": "succeeded"}, ""),
    ("actions/A2/", "PATCH", {"status": "succeeded"}, ""),
    ("actions/A9/", "PATCH", {"status": "succeeded"}, ""),
    ("actions/", "POST", {"tool": "charge_card", "item": "c", "amount_cents": 70, "status": "intended"}, "k4"),
    ("actions/", "POST", {"tool": "issue_credit", "amount_cents": 30, "reason": "goodwill"}, "k5"),
    ("actions/A3/", "PATCH", {"status": "failed", "reason": "card declined"}, ""),
    ("actions/", "POST", {"tool": "charge_card", "amount_cents": 30, "status": "intended"}, "k6"),
    ("actions/", "POST", {"tool": "send_note", "args": {"items": ["d", "e"]}}, "k7"),
]  # fmt: skip
AUDIT_FIELDS = ("op", "actor_kind", "from_version", "to_version", "change", "at_turn", "thread_turn",
                "after_tokens", "subject_id", "reason")  # fmt: skip


def _rows(ticket_id: str) -> dict[str, Any]:
    """What a ticket's writes left, as the desk reads it back, its intents' times aside."""

    def timeless(value: Any) -> Any:
        return json.loads(re.sub(r'"intended_at": "[^"]+"', '"intended_at": "-"', json.dumps(value)))

    ticket = Ticket.objects.get(ticket_id=ticket_id)
    pinned = PinnedState.objects.get(ticket=ticket)
    return {
        "state": [pinned.version, pinned.tokens, pinned.action_count, pinned.action_figures, pinned.data],
        "served": [pinned.served_version, pinned.served_tail, pinned.served_constraints],
        "actions": timeless(
            list(
                StateAction.objects.filter(state=pinned)
                .order_by("number")
                .values_list("number", "data", "served", "served_model", "open_intent")
            )
        ),
        "keys": sorted(StateActionKey.objects.filter(state=pinned).values_list("number", "key")),
        "audit": timeless(
            list(StateChange.objects.filter(ticket=ticket).order_by("id").values_list(*AUDIT_FIELDS))
        ),
        "answers": sorted(
            IdempotencyRecord.objects.filter(ticket=ticket).values_list("key", "fingerprint", "response_body")
        ),
        "ticket": [
            ticket.turn_count,
            ticket.context_tokens,
            ticket.open_intent_since is not None,
            ticket.open_intent_since and ticket.intent_stale_at - ticket.open_intent_since,
            ticket.state_over_threshold,
        ],
    }


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_rprime_writes_what_the_desk_reads_back_as_its_own(raw_dsn: None) -> None:
    """The same requests on two twin tickets, one through R' and one through the desk's API, answer the same
    and leave the same rows (the action rows and their keys, the state's figures and tokens, the audit, the
    keys' answers and fingerprints, the ticket's figures); the desk reads R''s state through its fast read, byte
    for byte the state it validates from the rows."""
    ensure_roles()  # an earlier transactional test on this worker may have flushed the migration's groups
    klass = TicketClass.objects.create(slug="roomy", token_budget=2_000_000_000, compaction_threshold=1.0)
    for tid in ("T\u2011R1", "T\u2011D1"):  # U+2011: the served texts keep non-ASCII as the desk renders it
        open_ticket(ticket_id=tid, order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    token = create_agent(name="bench-agent")
    desk = Client(HTTP_AUTHORIZATION=f"Token {token}")
    raw_base, desk_base = "/api/v1/tickets/T\u2011R1", "/api/v1/tickets/T\u2011D1"
    assert _call(f"{raw_base}/state/", "GET", "not-a-real-token-at-all")[0].startswith("401")
    for path, method, body, key in STEPS:
        raw_status, raw_answer = _call(f"{raw_base}/{path}", method, token, body, key)
        desk_status, desk_answer = _desk_call(desk, f"{desk_base}/{path}", method, body, key)
        assert raw_status[:3] == desk_status, (path, body, raw_answer, desk_answer)
        if raw_status.startswith("2"):
            assert raw_answer == desk_answer, (path, body)
        else:
            assert raw_answer["error"] == desk_answer["error"], (path, body)
    raw_rows = _rows("T\u2011R1")
    assert raw_rows == _rows("T\u2011D1")
    assert [(n, data["status"]) for n, data, *_ in raw_rows["actions"]] == [
        (1, "succeeded"), (2, "succeeded"), (3, "failed"), (4, "intended"), (5, "succeeded")
    ]  # fmt: skip
    assert len(raw_rows["keys"]) == 6 and raw_rows["ticket"][0] == 1 and raw_rows["ticket"][2]
    raw_ticket = Ticket.objects.get(ticket_id="T\u2011R1")
    raw_intent = StateAction.objects.get(state__ticket=raw_ticket, number=4).data["intended_at"]
    assert raw_ticket.open_intent_since == datetime.fromisoformat(raw_intent)

    # The desk reads R''s rows as its own: its fast read finds the served texts current, and they are the state
    # it validates from the rows, byte for byte.
    served = desk.get(f"{raw_base}/state/")
    assert not hasattr(served, "data"), "the desk did not find R''s served texts current"
    pinned = PinnedState.objects.select_related("ticket__ticket_class").get(ticket__ticket_id="T\u2011R1")
    expected = agent_state(ticket="T\u2011R1", order="SU-1", seller_type="marketplace", version=pinned.version,
                           items=pinned.items)  # fmt: skip
    assert served.content == JSONRenderer().render(expected)
    assert pinned.tokens == state_tokens(expected)  # R''s token count by deltas is the whole state's
    context = desk.get(f"{raw_base}/context/").json()
    assert context["pinned_state"] == model_state(expected)


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
    # The rows are what the desk would have written: the served texts join into the document built from the
    # items (the action from its row), the action's row, key, count and figures are the desk's for it.
    ticket, items = pinned.ticket, pinned.items
    built = agent_state(
        ticket=ticket.ticket_id,
        order=ticket.order_id,
        seller_type=ticket.seller_type,
        version=pinned.version,
        items=items,
    )
    assert pinned.served_text() == JSONRenderer().render(built).decode()
    assert pinned.served_text(model=True) == JSONRenderer().render(model_state(built)).decode()
    assert pinned.tokens == state_tokens(built, ticket.ticket_class.encoding)
    [action] = items.actions_taken
    assert action.args == {"order": ticket.order_id} and action.idempotency_key == f"q-{ticket.pk}"
    row, stored = StateAction.objects.get(state=pinned), action.model_dump(mode="json")
    assert (row.number, row.data, row.open_intent) == (1, stored, False)
    assert (row.served, row.served_model) == action_texts(
        stored
    )  # in the model's key order (jsonb has its own)
    keys = StateActionKey.objects.filter(state=pinned, number=1).values_list("key", flat=True)
    assert sorted(keys) == action_keys(action.item, action.args)
    assert (pinned.action_count, pinned.action_figures) == (1, ActionFigures.of([action]).as_json())
    assert "actions_taken" not in pinned.data and pinned.data["questions_opened"] == 1
    assert (
        CompactionEvent.objects.filter(ticket__ticket_id__startswith="Q-").count() == 12
    )  # one ticket in ten
