"""Notifications: recorded once per event, delivered by the task worker (the immediate backend here), retried
with back-off, signed, never redirected, cut by the timeout. Every webhook goes to a real loopback receiver."""

from __future__ import annotations

import io
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from core.notifications import backoff_seconds, message_body
from ledger.signature import SignatureError, verify
from notify import events
from notify.delivery import deliver
from notify.intents import check_stale_intents
from notify.models import Channel, Delivery, Notification
from tests.factories import chat
from tests.notify.conftest import Answer
from tickets.errors import RepeatRefused
from tickets.models import RefusedAttempt, Ticket, TicketClass
from tickets.services.actions import record_action

pytestmark = pytest.mark.django_db

SECRET = "whsec-test-\u017fecret"  # non-ASCII on purpose (a long s)


def webhook(ticket_class: TicketClass, url: str, **fields: Any) -> Channel:
    channel = Channel(
        ticket_class=ticket_class, name="#refunds", kind="webhook", url=url, secret=SECRET, **fields
    )
    channel.full_clean()
    channel.save()
    return channel


def refund(ticket: Ticket, key: str, **overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "tool": "issue_refund",
        "item": "garden\u2011table",  # a non-breaking hyphen: the same item as garden-table
        "amount_cents": 4000,
        "at_turn": 1,
        "reversible": False,
    }
    fields.update(overrides)
    return record_action(ticket=ticket, idempotency_key=key, **fields)


def refuse_a_repeat(ticket: Ticket) -> RefusedAttempt:
    chat(ticket, 2)
    refund(ticket, "k1")
    with pytest.raises(RepeatRefused):
        refund(ticket, "k2", item="garden-table")
    return RefusedAttempt.objects.get(ticket=ticket)


def make_due(notification: Notification) -> None:
    Notification.objects.filter(pk=notification.pk).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )


def test_a_refused_repeat_is_delivered_once_though_the_hook_fires_twice(
    ticket: Ticket, receiver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    hook = receiver([Answer(200)])
    webhook(ticket.ticket_class, hook.url)
    with django_capture_on_commit_callbacks(execute=True):
        attempt = refuse_a_repeat(ticket)
    with django_capture_on_commit_callbacks(execute=True):
        events.record_refusal(attempt)  # the hook fires again for the same refusal
    call_command("deliver_notifications", stdout=io.StringIO())
    notification = Notification.objects.get()
    assert notification.kind == "refused_repeat" and notification.source_id == f"refused:{attempt.pk}"
    assert notification.status == "delivered" and notification.attempts == 1
    assert Delivery.objects.count() == 1 and Delivery.objects.get().status_code == 200
    assert len(hook.received) == 1
    body = json.loads(hook.received[0].body)
    assert body["event"]["kind"] == "refused_repeat" and body["event"]["ticket"] == "T-1"
    assert body["event"]["refused"]["earlier_action_id"] == "A1"
    assert body["text"].startswith("Refused repeat on T-1: refused:")
    assert body["blocks"][0]["text"]["text"] == body["text"]
    assert hook.received[0].headers["X-Sundry-Event-Id"] == str(notification.event_id)


def test_two_racing_recorders_make_one_row(ticket: Ticket, receiver: Any) -> None:
    hook = receiver([Answer(200)])
    webhook(ticket.ticket_class, hook.url)
    kwargs: dict[str, Any] = dict(
        ticket_class_id=ticket.ticket_class_id,
        kind="failed_compaction",
        source_id="compaction:99",
        ticket_ref="T-1",
        detail="no valid summary",
        event={},
    )
    first = events.record(**kwargs)
    second = events.record(**kwargs)
    assert len(first) == 1 and second == []
    assert Notification.objects.count() == 1 and len(hook.received) == 1


def test_a_rolled_back_refusal_records_nothing(
    ticket: Ticket, django_capture_on_commit_callbacks: Any
) -> None:
    webhook(ticket.ticket_class, "http://127.0.0.1:9/never")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        try:
            with transaction.atomic():
                refuse_a_repeat(ticket)
                raise RuntimeError("the caller failed after the refusal")
        except RuntimeError:
            pass
    assert not RefusedAttempt.objects.exists()
    assert callbacks == [] and not Notification.objects.exists()


def test_a_500_is_retried_with_back_off_then_delivered(
    ticket: Ticket, receiver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    hook = receiver([Answer(500), Answer(200)])
    webhook(ticket.ticket_class, hook.url)
    with django_capture_on_commit_callbacks(execute=True):
        refuse_a_repeat(ticket)
    notification = Notification.objects.get()
    assert notification.status == "pending" and notification.attempts == 1
    assert notification.last_error.startswith("HTTP 500")
    # The first back-off is a second from the attempt's end (the Delivery row is written just after it).
    wait = notification.next_attempt_at - Delivery.objects.get().created_at
    assert timedelta(0) < wait <= timedelta(seconds=1)
    # Not due yet: the periodic command leaves it.
    call_command("deliver_notifications", stdout=io.StringIO())
    assert len(hook.received) == 1
    make_due(notification)
    call_command("deliver_notifications", stdout=io.StringIO())
    notification.refresh_from_db()
    assert notification.status == "delivered" and notification.attempts == 2 and notification.last_error == ""
    assert list(Delivery.objects.values_list("attempt", "status_code", "succeeded")) == [
        (1, 500, False),
        (2, 200, True),
    ]
    ids = {r.headers["X-Sundry-Event-Id"] for r in hook.received}
    assert ids == {str(notification.event_id)}  # a retry is the same event


def test_it_gives_up_after_the_last_attempt(settings: Any, ticket: Ticket, receiver: Any) -> None:
    settings.SUNDRY_NOTIFY_MAX_ATTEMPTS = 3
    hook = receiver([Answer(503)])
    webhook(ticket.ticket_class, hook.url)
    [notification] = events.record(
        ticket_class_id=ticket.ticket_class_id,
        kind="failed_compaction",
        source_id="compaction:1",
        ticket_ref="T-1",
        detail="",
        event={},
    )
    waits = []
    for _ in range(5):
        notification.refresh_from_db()
        if notification.next_attempt_at is None:
            break
        waits.append(notification.next_attempt_at)
        deliver(notification.pk, now=notification.next_attempt_at + timedelta(milliseconds=1))
    notification.refresh_from_db()
    assert (
        notification.status == "failed"
        and notification.attempts == 3
        and notification.next_attempt_at is None
    )
    assert Delivery.objects.filter(notification=notification).count() == 3 == len(hook.received)
    assert deliver(notification.pk, now=timezone.now() + timedelta(days=1)) is None


def test_the_signature_verifies_with_the_secret_and_not_with_another(ticket: Ticket, receiver: Any) -> None:
    hook = receiver([Answer(200)])
    webhook(ticket.ticket_class, hook.url)
    events.record(
        ticket_class_id=ticket.ticket_class_id,
        kind="coverage_miss",
        source_id="compaction:5",
        ticket_ref="T-1",
        detail="misses A1",
        event={"compaction": {"number": 5}},
    )
    [request] = hook.received
    header = request.headers["X-Sundry-Signature"]
    assert header.startswith("t=") and ",v1=" in header
    assert verify(secret=SECRET, header=header, body=request.body, now=time.time())
    with pytest.raises(SignatureError):
        verify(secret="another-secret", header=header, body=request.body, now=time.time())
    with pytest.raises(SignatureError):
        verify(secret=SECRET, header=header, body=request.body + b" ", now=time.time())
    assert SECRET not in request.body.decode() and SECRET not in json.dumps(request.headers)


def test_a_redirect_is_not_followed(ticket: Ticket, receiver: Any) -> None:
    elsewhere = receiver([Answer(200)])
    hook = receiver([Answer(302, {"Location": elsewhere.url})])
    webhook(ticket.ticket_class, hook.url)
    [notification] = events.record(
        ticket_class_id=ticket.ticket_class_id,
        kind="forced_compaction",
        source_id="compaction:7",
        ticket_ref="T-1",
        detail="hard ceiling",
        event={},
    )
    notification.refresh_from_db()
    assert len(hook.received) == 1 and elsewhere.received == []
    delivery = Delivery.objects.get()
    assert delivery.status_code == 302 and not delivery.succeeded
    assert "redirect not followed" in delivery.error
    assert notification.status == "pending" and notification.next_attempt_at is not None


def test_a_receiver_that_hangs_is_cut_by_the_timeout_and_retried(
    settings: Any, ticket: Ticket, receiver: Any
) -> None:
    settings.SUNDRY_NOTIFY_TIMEOUT_SECONDS = 0.3
    hook = receiver([Answer(200, hang=True), Answer(200)])
    webhook(ticket.ticket_class, hook.url)
    [notification] = events.record(
        ticket_class_id=ticket.ticket_class_id,
        kind="over_budget_compaction",
        source_id="compaction:8",
        ticket_ref="T-1",
        detail="no safe cut",
        event={},
    )
    notification.refresh_from_db()
    first = Delivery.objects.get()
    assert not first.succeeded and first.status_code is None and "timed out" in first.error
    assert notification.status == "pending"
    make_due(notification)
    deliver(notification.pk)
    notification.refresh_from_db()
    assert notification.status == "delivered" and notification.attempts == 2 and len(hook.received) == 2


def test_an_email_channel_sends_through_the_mail_backend(
    ticket: Ticket, django_capture_on_commit_callbacks: Any
) -> None:
    Channel.objects.create(
        ticket_class=ticket.ticket_class,
        name="supervisors",
        kind="email",
        recipients="sam@example.com,\nada@example.com",
        events=["refused_repeat"],
    )
    with django_capture_on_commit_callbacks(execute=True):
        refuse_a_repeat(ticket)
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["sam@example.com", "ada@example.com"]
    assert message.subject.startswith("[Sundry Desk] Refused repeat on T-1")
    assert "http://" in message.body and "/tickets/T-1/" in message.body
    assert Delivery.objects.get().succeeded and Notification.objects.get().status == "delivered"


def test_an_unsubscribed_kind_and_another_class_get_nothing(ticket: Ticket, receiver: Any) -> None:
    hook = receiver([Answer(200)])
    webhook(ticket.ticket_class, hook.url, events=["coverage_miss"])
    other = TicketClass.objects.create(slug="other", token_budget=4000, compaction_threshold=0.8)
    webhook(other, hook.url)
    created = events.record(
        ticket_class_id=ticket.ticket_class_id,
        kind="refused_repeat",
        source_id="refused:1",
        ticket_ref="T-1",
        detail="",
        event={},
    )
    assert created == [] and hook.received == []


def test_an_intent_past_its_limit_is_notified_once(
    ticket: Ticket, receiver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    hook = receiver([Answer(200)])
    webhook(ticket.ticket_class, hook.url, events=["intent_past_limit"])
    chat(ticket, 2)
    with django_capture_on_commit_callbacks(execute=True):
        refund(ticket, "k1", status="intended")
    assert check_stale_intents() == []  # not past its 15 minutes yet
    ticket.refresh_from_db()
    later = ticket.intent_stale_at + timedelta(minutes=1)
    first = check_stale_intents(now=later)
    second = check_stale_intents(now=later + timedelta(hours=1))
    assert len(first) == 1 and second == []
    Ticket.objects.filter(pk=ticket.pk).update(intent_stale_at=timezone.now() - timedelta(minutes=1))
    call_command("deliver_notifications", stdout=io.StringIO())
    assert Notification.objects.count() == 1 and len(hook.received) == 1
    event = json.loads(hook.received[0].body)["event"]
    assert event["kind"] == "intent_past_limit" and event["intent"]["limit_minutes"] == 15
    assert [a["id"] for a in event["intent"]["actions"]] == ["A1"]


def test_channel_validation_names_what_is_wrong(standard_class: TicketClass) -> None:
    cases = [
        (dict(kind="webhook", url="", secret="s"), "url"),
        (dict(kind="webhook", url="ftp://example.com/x", secret="s"), "url"),
        (dict(kind="webhook", url="https://example.com/x", secret=""), "secret"),
        (dict(kind="email", recipients="not-an-address"), "recipients"),
        (dict(kind="email", recipients="a@example.com", events=["coverage_miss", "refunds"]), "events"),
        (dict(kind="email", recipients="a@example.com", events=[]), "events"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as error:
            Channel(ticket_class=standard_class, name="x", **fields).full_clean()
        assert field in error.value.message_dict, fields


def test_back_off_doubles_and_is_capped() -> None:
    assert [backoff_seconds(n, base=1, cap=5) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    with pytest.raises(ValueError):
        backoff_seconds(0, base=1, cap=5)


def test_the_body_is_slack_compatible() -> None:
    body = message_body(text="hi", event={"id": "e1", "kind": "coverage_miss"}, link="http://x/tickets/T-1/")
    assert body["text"] == "hi" and body["blocks"][0]["type"] == "section"
    assert "<http://x/tickets/T-1/|open the ticket>" in body["blocks"][1]["elements"][0]["text"]
    assert body["event"]["kind"] == "coverage_miss"
