"""Notification channels per ticket class, the notifications recorded for them, and each delivery attempt.

A notification is unique per (channel, event kind, source object): the database refuses a second row, so an
event is recorded, and sent, once however often its hook fires or however many workers race on it.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email
from django.db import models

from core.notifications import ChannelKind, NotificationStatus, NotifyEvent
from core.vocabulary import choices, values


def all_event_kinds() -> list[str]:
    return values(NotifyEvent)


class Channel(models.Model):
    """Where a ticket class's events go: a webhook (signed, Slack-compatible JSON) or email."""

    # By name: the tickets app imports the notification hooks, so this app does not import its models.
    ticket_class = models.ForeignKey(
        "tickets.TicketClass", on_delete=models.CASCADE, related_name="notification_channels"
    )
    name = models.CharField(max_length=100, help_text="What the admins call it, e.g. '#refunds-oncall'.")
    kind = models.CharField(max_length=10, choices=choices(ChannelKind), default=ChannelKind.WEBHOOK)
    url = models.URLField(
        max_length=500,
        blank=True,
        help_text="Webhook: where the desk POSTs (http or https; redirects not followed).",
    )
    secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="Webhook: the signing secret (X-Sundry-Signature: t=<unix>,v1=<hex HMAC-SHA256 of 't.body'>).",
    )
    recipients = models.TextField(blank=True, help_text="Email: addresses, separated by commas or new lines.")
    events = models.JSONField(
        default=all_event_kinds,
        help_text="The event kinds sent: " + ", ".join(values(NotifyEvent)) + ".",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["ticket_class", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def recipient_list(self) -> list[str]:
        return [a.strip() for a in self.recipients.replace("\n", ",").split(",") if a.strip()]

    def clean(self) -> None:
        errors: dict[str, Any] = {}
        kinds = self.events if isinstance(self.events, list) else None
        if kinds is None or not all(isinstance(k, str) for k in kinds):
            errors["events"] = 'a list of event kinds, e.g. ["coverage_miss", "refused_repeat"]'
        else:
            unknown = sorted(set(kinds) - set(values(NotifyEvent)))
            if unknown:
                errors["events"] = (
                    f"unknown event kind(s) {', '.join(unknown)}; known: {', '.join(values(NotifyEvent))}"
                )
            elif not kinds:
                errors["events"] = "subscribe to at least one event kind"
        if self.kind == ChannelKind.WEBHOOK:
            if not self.url:
                errors["url"] = "a webhook needs a URL"
            else:
                try:
                    URLValidator(schemes=["http", "https"])(self.url)
                except ValidationError:
                    errors["url"] = "an http:// or https:// URL"
            if not self.secret:
                errors["secret"] = "a webhook needs a signing secret"
        elif self.kind == ChannelKind.EMAIL:
            addresses = self.recipient_list()
            if not addresses:
                errors["recipients"] = "an email channel needs at least one address"
            for address in addresses:
                try:
                    validate_email(address)
                except ValidationError:
                    errors["recipients"] = f"{address!r} is not an email address"
                    break
        if errors:
            raise ValidationError(errors)


class Notification(models.Model):
    """One event for one channel: recorded once, then delivered (and retried) by the task worker."""

    event_id = models.UUIDField(
        default=uuid.uuid4, unique=True, editable=False, help_text="X-Sundry-Event-Id."
    )
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=30, choices=choices(NotifyEvent))
    source_id = models.CharField(
        max_length=200,
        help_text="The object the event is about, e.g. compaction:12, refused:7, intent:3@<time>.",
    )
    ticket_ref = models.CharField(max_length=64, help_text="The ticket's id (T-40118), for the list.")
    text = models.TextField(help_text="The one-line message.")
    event = models.JSONField(help_text="The machine-readable event object sent with the message.")
    status = models.CharField(
        max_length=10, choices=choices(NotificationStatus), default=NotificationStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When the next attempt is due (empty once delivered or given up)."
    )
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "kind", "source_id"], name="notification_once_per_event"
            )
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="notification_due",
                condition=models.Q(status="pending"),
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.ticket_ref} -> {self.channel}"


class Delivery(models.Model):
    """One attempt to deliver a notification: what the receiver answered, or why it could not."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    attempt = models.PositiveIntegerField()
    succeeded = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="", help_text="Why it failed, truncated.")
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["notification", "attempt"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["notification", "attempt"], name="delivery_attempt_once")
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} of {self.notification_id}: {'ok' if self.succeeded else 'failed'}"
