"""Admins configure channels in the Django admin and see notifications and their deliveries, read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import Client

from notify import events
from notify.models import Channel, Delivery, Notification
from tests.notify.conftest import Answer
from tickets.models import TicketClass

pytestmark = pytest.mark.django_db


@pytest.fixture
def root() -> Client:
    User.objects.create_superuser("root", password="pw-root-123")
    client = Client()
    client.login(request=HttpRequest(), username="root", password="pw-root-123")
    return client


def test_an_admin_adds_a_webhook_channel_and_the_secret_is_never_shown(
    root: Client, standard_class: TicketClass
) -> None:
    form = {
        "ticket_class": standard_class.pk,
        "name": "#refunds",
        "kind": "webhook",
        "url": "https://hooks.example.com/sundry",
        "secret": "whsec-admin-secret",
        "recipients": "",
        "events": ["coverage_miss", "refused_repeat"],
        "enabled": "on",
    }
    answer = root.post("/admin/notify/channel/add/", form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    channel = Channel.objects.get()
    assert channel.secret == "whsec-admin-secret" and channel.events == ["coverage_miss", "refused_repeat"]
    page = root.get(f"/admin/notify/channel/{channel.pk}/change/").content.decode()
    assert "whsec-admin-secret" not in page
    # Saving without retyping the secret keeps it.
    answer = root.post(f"/admin/notify/channel/{channel.pk}/change/", {**form, "secret": "", "name": "#cx"})
    assert answer.status_code == 302
    channel.refresh_from_db()
    assert channel.secret == "whsec-admin-secret" and channel.name == "#cx"


def test_a_webhook_without_a_url_is_refused_with_a_message(root: Client, standard_class: TicketClass) -> None:
    answer = root.post(
        "/admin/notify/channel/add/",
        {"ticket_class": standard_class.pk, "name": "x", "kind": "webhook", "url": "", "secret": "s",
         "events": ["coverage_miss"]},
    )  # fmt: skip
    assert answer.status_code == 200 and "a webhook needs a URL" in answer.content.decode()
    assert not Channel.objects.exists()


def test_notifications_and_deliveries_are_listed_read_only(
    root: Client, standard_class: TicketClass, receiver: Any
) -> None:
    hook = receiver([Answer(500)])
    Channel.objects.create(ticket_class=standard_class, name="#cx", url=hook.url, secret="s")
    [notification] = events.record(
        ticket_class_id=standard_class.pk,
        kind="failed_compaction",
        source_id="compaction:3",
        ticket_ref="T-77",
        detail="no valid summary in 3 attempt(s)",
        event={},
    )
    listing = root.get("/admin/notify/notification/").content.decode()
    assert "T-77" in listing and "HTTP 500" in listing and "Pending" in listing
    page = root.get(f"/admin/notify/notification/{notification.pk}/change/").content.decode()
    assert "HTTP 500" in page and 'name="_save"' not in page
    assert (
        root.post(f"/admin/notify/notification/{notification.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert Notification.objects.count() == 1 and Delivery.objects.count() == 1
    assert root.get("/admin/notify/delivery/").status_code == 200
