"""An import compacts as live agents do: each turn commits on its own, its compaction runs after the commit."""

from __future__ import annotations

import json
import threading
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.test import override_settings

from compaction.models import CompactionEvent
from desk.turns import receive_turn, rehearse_turn
from tests.browser.desk_data import ensure_roles
from tests.fake_openai import Reply
from tickets.accounts import create_agent
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

CLASS = {
    "slug": "small-import",
    "token_budget": 2000,
    "compaction_threshold": 0.8,
    "keep_recent_tokens": 200,
    "summarizer_backend": "openai",
    "summarizer_model": "cheap",
}


def _hanging_import(tmp_path: Path) -> Path:
    doc = {
        "ticket_id": "T-IMP",
        "order_id": "SU-9",
        "seller_type": "marketplace",
        "ticket_class": CLASS,
        "turns": [
            {"role": "customer", "content": "My parcel is late. " * 280},
            {"role": "agent", "content": "Checking with the carrier. " * 40, "boundary": "reply_sent"},
            {"role": "customer", "content": "Thanks."},
        ],
    }
    path = tmp_path / "hang.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(SUNDRY_COMPACTION_DEADLINE_SECONDS=4.0)
def test_an_import_whose_summarizer_hangs_holds_no_row_lock(tmp_path: Path, openai_server) -> None:
    """While the importer's summarizer hangs, an action on another ticket of the same class and a GET of the
    imported ticket's state answer at once: the turns before it are committed, nothing is locked."""
    from rest_framework.test import APIClient

    ensure_roles()
    token = create_agent(name="agent-imp")
    klass = TicketClass.objects.create(**CLASS)
    open_ticket(ticket_id="T-OTHER", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    path = _hanging_import(tmp_path)
    out = StringIO()

    def run_import() -> None:
        try:
            call_command("import_tickets", str(path), stdout=out, stderr=StringIO())
        finally:
            connections.close_all()

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    with openai_server([Reply(content="{}", delay=30)]) as fake:
        importer = threading.Thread(target=run_import)
        importer.start()
        for _ in range(500):
            if fake.requests:
                break
            time.sleep(0.02)
        assert fake.requests, f"the importer never called the summarizer: {out.getvalue()}"
        action = client.post(
            "/api/v1/tickets/T-OTHER/actions/",
            {"tool": "track_parcel", "item": "parcel-1", "reversible": True},
            format="json",
            HTTP_IDEMPOTENCY_KEY="track-1",
        )
        state = client.get("/api/v1/tickets/T-IMP/state/")
        during = importer.is_alive()
        importer.join(timeout=30)
    assert action.status_code == 201, action.content
    assert state.status_code == 200, state.content
    assert during, "the action and the state answered only after the import's compaction finished"
    assert "imported 1 ticket" in out.getvalue()
    assert Ticket.objects.get(ticket_id="T-IMP").turn_count == 3
    assert CompactionEvent.objects.get(ticket__ticket_id="T-IMP", at_turn=2).status == "failed"


@pytest.mark.django_db
def test_receive_turn_cannot_be_wrapped_in_a_transaction(ticket: Ticket) -> None:
    """No caller can hold a transaction (and its locks) around a turn and the model call after it."""
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic(durable=True):
        receive_turn(ticket=ticket, role="customer", content="hello")


@pytest.mark.django_db(transaction=True)
def test_a_rehearsal_needs_the_callers_transaction(ticket: Ticket) -> None:
    with pytest.raises(RuntimeError, match="rolls back"):
        rehearse_turn(ticket=ticket, role="customer", content="hello")
