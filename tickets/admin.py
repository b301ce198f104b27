from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from core.caps import CatalogCapsError, MoneyCaps
from core.identity import CatalogError, ToolCatalog
from core.tokens import UnknownEncoding, get_encoding
from core.vocabulary import ActorKind
from tickets.accounts import revoke_agent_tokens
from tickets.models import (
    AgentToken,
    IdempotencyRecord,
    PinnedState,
    RefusedAttempt,
    StateChange,
    Ticket,
    TicketClass,
    TicketClassChange,
    TicketStatusChange,
    Turn,
)
from tickets.services.actors import Actor
from tickets.services.classes import CLASS_AUDITED_FIELDS, save_ticket_class
from tickets.services.lifecycle import set_ticket_status


class AppendOnlyAdmin(admin.ModelAdmin):
    """Turns, actions (in the pinned state), audit rows and snapshots are never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TicketClassForm(forms.ModelForm):
    change_reason = forms.CharField(
        required=False,
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the class changes; kept in its audit. Required for a change: a new budget or "
        "threshold applies from each ticket's next turn, and past turns keep the figures they had.",
    )

    class Meta:
        model = TicketClass
        fields = list(CLASS_AUDITED_FIELDS)  # every setting an admin may change is audited

    def clean_encoding(self) -> str:
        encoding = self.cleaned_data["encoding"]
        try:
            get_encoding(encoding)
        except UnknownEncoding as exc:
            raise forms.ValidationError(str(exc)) from None
        return encoding

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if "irreversible_tools" in cleaned and "money_tools" in cleaned:
            try:
                ToolCatalog.build(irreversible=cleaned["irreversible_tools"], money=cleaned["money_tools"])
            except CatalogError as exc:
                field = "irreversible_tools" if "irreversible" in str(exc) else "money_tools"
                self.add_error(field, str(exc))
        if (
            self.instance.pk is not None
            and self.has_changed()
            and not cleaned.get("change_reason", "").strip()
        ):
            self.add_error("change_reason", "Say why the class changes: the reason is kept in its audit.")
        if "money_caps" in cleaned:
            try:
                MoneyCaps.build(cleaned["money_caps"])
            except CatalogCapsError as exc:
                self.add_error("money_caps", str(exc))
        return cleaned


@admin.register(TicketClass)
class TicketClassAdmin(admin.ModelAdmin):
    """Budgets are admins' business; every save is audited with the settings before and after."""

    form = TicketClassForm
    list_display = [
        "slug",
        "token_budget",
        "compaction_threshold",
        "keep_recent_tokens",
        "summarizer_backend",
        "summarizer_model",
    ]

    def save_model(self, request: HttpRequest, obj: TicketClass, form: Any, change: bool) -> None:
        reason = form.cleaned_data.get("change_reason", "")
        save_ticket_class(ticket_class=obj, by=request.user, reason=reason)  # type: ignore[arg-type]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(TicketClassChange)
class TicketClassChangeAdmin(AppendOnlyAdmin):
    list_display = ["ticket_class", "actor", "reason", "created_at"]
    list_select_related = ["ticket_class", "actor"]
    readonly_fields = ["ticket_class", "actor", "before", "after", "reason", "created_at"]


class TicketStatusForm(forms.ModelForm):
    status_reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the status changes; kept in the ticket's status audit.",
    )

    class Meta:
        model = Ticket
        fields = ["status"]


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    """Only the status is editable, and it changes through set_ticket_status (audited)."""

    form = TicketStatusForm
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

    def save_model(self, request: HttpRequest, obj: Ticket, form: Any, change: bool) -> None:
        if "status" in form.changed_data:
            new_status = obj.status
            obj.status = form.initial["status"]
            set_ticket_status(
                ticket=obj,
                status=new_status,
                by=Actor(kind=ActorKind.SUPERVISOR, user=request.user),  # type: ignore[arg-type]
                reason=form.cleaned_data.get("status_reason", ""),
            )


@admin.register(TicketStatusChange)
class TicketStatusChangeAdmin(AppendOnlyAdmin):
    list_display = ["ticket", "from_status", "to_status", "actor_kind", "actor", "created_at"]
    list_filter = ["to_status", "actor_kind"]
    list_select_related = ["ticket", "actor"]
    search_fields = ["ticket__ticket_id"]


@admin.register(RefusedAttempt)
class RefusedAttemptAdmin(AppendOnlyAdmin):
    list_display = ["ticket", "tool", "item", "amount_cents", "earlier_action_id", "actor", "created_at"]
    list_select_related = ["ticket", "actor"]
    search_fields = ["ticket__ticket_id", "tool", "item"]


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


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    """Agents' API tokens: who, the key's prefix, when last used, the ticket classes it may act on (an admin
    narrows them; none = every class); revocable. The digest is never shown and the secret is not stored:
    `manage.py create_agent` prints a key once."""

    list_display = ["prefix", "user", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user"]
    search_fields = ["prefix", "user__username"]
    # The classes it may act on are the one thing an admin edits: none selected means every class.
    fields = ["prefix", "user", "ticket_classes", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "user", "created_at", "last_used_at", "revoked_at"]
    filter_horizontal = ["ticket_classes"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        count = sum(
            revoke_agent_tokens(prefix=token.prefix) for token in queryset.filter(revoked_at__isnull=True)
        )
        self.message_user(request, f"revoked {count} token(s)")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # `manage.py create_agent` issues tokens and prints the key once

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked tokens stay, with their last use, for the record
