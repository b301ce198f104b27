from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from core.notifications import NotifyEvent
from core.vocabulary import choices
from notify.models import Channel, Delivery, Notification
from tickets.admin import AppendOnlyAdmin


class ChannelForm(forms.ModelForm):
    events = forms.MultipleChoiceField(
        choices=choices(NotifyEvent),
        widget=forms.CheckboxSelectMultiple,
        help_text="The events this channel gets.",
    )
    secret = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.PasswordInput(render_value=False),
        help_text="Webhook: the signing secret. Leave empty to keep the current one.",
    )

    class Meta:
        model = Channel
        fields = ["ticket_class", "name", "kind", "url", "secret", "recipients", "events", "enabled"]

    def clean_secret(self) -> str:
        # The secret is never shown again: an empty field keeps the stored one.
        return self.cleaned_data.get("secret") or (self.instance.secret if self.instance.pk else "")


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    form = ChannelForm
    list_display = ["name", "ticket_class", "kind", "target", "subscribed", "enabled"]
    list_filter = ["kind", "enabled", "ticket_class"]
    list_select_related = ["ticket_class"]

    @admin.display(description="sends to")
    def target(self, obj: Channel) -> str:
        return obj.url if obj.kind == "webhook" else ", ".join(obj.recipient_list())

    @admin.display(description="events")
    def subscribed(self, obj: Channel) -> str:
        return ", ".join(obj.events) if isinstance(obj.events, list) else ""


class DeliveryInline(admin.TabularInline):
    model = Delivery
    fields = ("attempt", "succeeded", "status_code", "error", "duration_ms", "created_at")
    readonly_fields = ("attempt", "succeeded", "status_code", "error", "duration_ms", "created_at")
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(AppendOnlyAdmin):
    """Read-only: what was recorded, where it went, how each attempt ended."""

    list_display = [
        "created_at",
        "kind",
        "ticket_ref",
        "channel",
        "status",
        "attempts",
        "next_attempt_at",
        "error",
    ]
    list_filter = ["status", "kind", "channel"]
    search_fields = ["ticket_ref", "source_id", "event_id"]
    list_select_related = ["channel"]
    inlines = [DeliveryInline]

    @admin.display(description="last error")
    def error(self, obj: Notification) -> str:
        return obj.last_error[:120]


@admin.register(Delivery)
class DeliveryAdmin(AppendOnlyAdmin):
    list_display = [
        "created_at",
        "notification",
        "attempt",
        "succeeded",
        "status_code",
        "duration_ms",
        "error",
    ]
    list_filter = ["succeeded"]
    list_select_related = ["notification__channel"]
