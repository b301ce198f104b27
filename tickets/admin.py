from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from tickets.models import IdempotencyRecord, PinnedState, StateChange, Ticket, TicketClass, Turn


class AppendOnlyAdmin(admin.ModelAdmin):
    """Turns, actions (in the pinned state), audit rows and snapshots are never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(TicketClass)
class TicketClassAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "token_budget",
        "compaction_threshold",
        "keep_recent_tokens",
        "summarizer_backend",
        "summarizer_model",
    ]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = [
        "ticket_id",
        "order_id",
        "ticket_class",
        "status",
        "turn_count",
        "context_tokens",
        "updated_at",
    ]
    list_filter = ["status", "ticket_class"]
    search_fields = ["ticket_id", "order_id"]
    list_select_related = ["ticket_class"]
    readonly_fields = [
        "ticket_id",
        "order_id",
        "seller_type",
        "ticket_class",
        "system_prompt",
        "system_prompt_tokens",
        "context_tokens",
        "turn_count",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Turn)
class TurnAdmin(AppendOnlyAdmin):
    list_display = ["ticket", "number", "role", "tool", "boundary", "tokens"]
    list_select_related = ["ticket"]
    search_fields = ["ticket__ticket_id"]


@admin.register(PinnedState)
class PinnedStateAdmin(AppendOnlyAdmin):
    list_display = ["ticket", "version", "tokens", "updated_at"]
    list_select_related = ["ticket"]


@admin.register(StateChange)
class StateChangeAdmin(AppendOnlyAdmin):
    list_display = [
        "ticket",
        "op",
        "actor_kind",
        "actor",
        "from_version",
        "to_version",
        "at_turn",
        "created_at",
    ]
    list_filter = ["op", "actor_kind"]
    list_select_related = ["ticket", "actor"]


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(AppendOnlyAdmin):
    list_display = ["ticket", "key", "response_status", "created_at"]
    list_select_related = ["ticket"]
