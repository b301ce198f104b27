"""POST /api/v1/ledger/: signed as the payment providers sign their webhooks, idempotent, all or nothing."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from ledger.models import LedgerEntry, Reconciliation
from ledger.signature import SignatureError, signature_header, verify
from tests.ledger.conftest import entry, refund
from tickets.models import Ticket

pytestmark = pytest.mark.django_db
SECRET = "whsec_test_0123456789"
URL = "/api/v1/ledger/"


@pytest.fixture(autouse=True)
def secret(settings: Any) -> None:
    settings.SUNDRY_LEDGER_SECRET = SECRET


def send(
    client: Client,
    body: bytes | dict[str, Any],
    *,
    t: int | None = None,
    secret: str = SECRET,
    header: str | None = None,
) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    signed = (
        header
        if header is not None
        else signature_header(secret=secret, timestamp=t or int(time.time()), body=raw)
    )
    return client.post(URL, raw, content_type="application/json", HTTP_SUNDRY_SIGNATURE=signed)


def test_a_signed_entry_is_stored_and_reconciled(client: Client, ticket: Ticket) -> None:
    a1 = refund(ticket, "k1")
    response = send(client, entry("ev_1"))
    assert response.status_code == 200, response.content
    assert response.json()["created"] == ["ev_1"]
    assert response.json()["reconciliation"]["matched"] == 1
    assert Reconciliation.objects.get().action_id == a1


def test_a_batch_is_stored_whole(client: Client, ticket: Ticket) -> None:
    response = send(client, {"entries": [entry("ev_1"), entry("ev_2", amount_cents=100)]})
    assert response.status_code == 200
    assert sorted(LedgerEntry.objects.values_list("entry_id", flat=True)) == ["ev_1", "ev_2"]


def test_a_bad_signature_is_refused_and_nothing_written(client: Client, ticket: Ticket) -> None:
    response = send(client, entry("ev_1"), secret="not-the-secret")
    assert response.status_code == 401
    assert response.json()["error"] == "bad_signature"
    assert not LedgerEntry.objects.exists()


def test_a_body_changed_after_signing_is_refused(client: Client, ticket: Ticket) -> None:
    signed = signature_header(
        secret=SECRET, timestamp=int(time.time()), body=json.dumps(entry("ev_1")).encode()
    )
    response = send(client, entry("ev_1", amount_cents=999999), header=signed)
    assert response.status_code == 401
    assert not LedgerEntry.objects.exists()


@pytest.mark.parametrize("age", [330, -330, 86400])
def test_a_signature_outside_five_minutes_is_refused(client: Client, ticket: Ticket, age: int) -> None:
    response = send(client, entry("ev_1"), t=int(time.time()) - age)
    assert response.status_code == 401
    assert "seconds from the desk's clock" in response.json()["message"]
    assert not LedgerEntry.objects.exists()


def test_a_missing_or_malformed_header_is_refused(client: Client, ticket: Ticket) -> None:
    raw = json.dumps(entry("ev_1")).encode()
    assert client.post(URL, raw, content_type="application/json").json()["error"] == "signature_missing"
    for header in ("v1=abc", "t=now,v1=abc", f"t={int(time.time())}", "garbage"):
        response = send(client, raw, header=header)
        assert response.status_code == 401, header
    assert not LedgerEntry.objects.exists()


def test_any_of_several_v1_signatures_may_match(client: Client, ticket: Ticket) -> None:
    """A secret being rolled: the sender signs with the old and the new one."""
    raw = json.dumps(entry("ev_1")).encode()
    t = int(time.time())
    old = signature_header(secret="old-secret", timestamp=t, body=raw).split(",")[1]
    new = signature_header(secret=SECRET, timestamp=t, body=raw)
    response = send(client, raw, header=f"{new},{old}")
    assert response.status_code == 200


def test_a_replayed_request_is_answered_and_writes_nothing_more(client: Client, ticket: Ticket) -> None:
    raw = json.dumps(entry("ev_1")).encode()
    header = signature_header(secret=SECRET, timestamp=int(time.time()), body=raw)
    first = send(client, raw, header=header)
    again = send(client, raw, header=header)
    assert first.json()["created"] == ["ev_1"]
    assert (again.status_code, again.json()["created"], again.json()["duplicates"]) == (200, [], ["ev_1"])
    assert LedgerEntry.objects.count() == 1
    assert Reconciliation.objects.count() == 1


def test_the_same_id_with_other_content_is_a_conflict(client: Client, ticket: Ticket) -> None:
    send(client, entry("ev_1"))
    response = send(client, {"entries": [entry("ev_2"), entry("ev_1", amount_cents=1)]})
    assert response.status_code == 409
    assert response.json()["error"] == "entry_conflict"
    assert list(LedgerEntry.objects.values_list("entry_id", "amount_cents")) == [("ev_1", 4000)]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (b"{not json", "the body is not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "one entry"),
        (b'{"entries": []}', "entries is empty"),
        (b'{"entries": [], "x": 1}', "nothing else"),
        (b'{"id": "a", "id": "b"}', "appears twice"),
        (b'{"id": "a", "amount_cents": NaN}', "NaN"),
    ],
)
def test_a_body_that_is_not_entries_is_a_json_error(
    client: Client, ticket: Ticket, body: bytes, where: str
) -> None:
    response = send(client, body)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert where in response.json()["message"]


def test_one_bad_entry_refuses_the_batch_naming_each_field(client: Client, ticket: Ticket) -> None:
    bad = entry("ev_2", amount_cents=-5, kind="chargeback", currency="usd")
    del bad["created_at"]
    response = send(client, {"entries": [entry("ev_1"), bad, entry("ev_3", ticket_id="T-unknown")]})
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_ledger"
    fields = {(e["where"], e["field"]) for e in body["errors"]}
    assert {
        ("entries[1]", "kind"),
        ("entries[1]", "amount_cents"),
        ("entries[1]", "currency"),
        ("entries[1]", "created_at"),
    } <= fields
    assert not LedgerEntry.objects.exists()


def test_an_unknown_ticket_is_refused_after_the_fields_are_valid(client: Client, ticket: Ticket) -> None:
    response = send(client, {"entries": [entry("ev_1"), entry("ev_3", ticket_id="T-unknown")]})
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"where": "entries[1]", "field": "ticket_id", "message": "no ticket 'T-unknown'"}
    ]
    assert not LedgerEntry.objects.exists()


def test_no_agent_token_is_needed_and_a_token_alone_is_not_enough(
    client: Client, ticket: Ticket, agent
) -> None:
    raw = json.dumps(entry("ev_1")).encode()
    assert agent.post(URL, raw, content_type="application/json").status_code == 401
    assert send(client, raw).status_code == 200


def test_without_a_secret_the_webhook_is_off(client: Client, ticket: Ticket, settings: Any) -> None:
    settings.SUNDRY_LEDGER_SECRET = ""
    response = send(client, entry("ev_1"), secret="")
    assert response.status_code == 503
    assert "SUNDRY_LEDGER_SECRET" in response.json()["message"]


def test_only_post(client: Client) -> None:
    response = client.get(URL)
    assert (response.status_code, response["Allow"]) == (405, "POST")


def test_verify_compares_the_hmac_of_the_timestamp_and_the_raw_body() -> None:
    """The scheme itself, against a signature computed by hand with hmac (not by our sign())."""
    import hashlib
    import hmac

    body = b'{"id":"ev_1"}'
    digest = hmac.new(b"k", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert verify(secret="k", header=f"t=1700000000,v1={digest}", body=body, now=1700000100) == 1700000000
    with pytest.raises(SignatureError):
        verify(secret="k", header=f"t=1700000000,v1={digest}", body=body + b" ", now=1700000100)
    with pytest.raises(SignatureError):
        verify(secret="k", header=f"t=1700000000,v1={digest}", body=body, now=1700000301)
