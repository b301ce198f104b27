from __future__ import annotations

from django.contrib import admin

from compaction.models import CompactionEvent, CompactionReview, ContextSnapshot
from tickets.admin import AppendOnlyAdmin


@admin.register(CompactionEvent)
class CompactionEventAdmin(AppendOnlyAdmin):
    list_display = [
        "ticket",
        "number",
        "at_turn",
        "status",
        "tokens_before",
        "tokens_after",
        "coverage_missing_count",
        "cost_usd",
        "latency_ms",
    ]
    list_filter = ["status", "summarizer_backend"]
    list_select_related = ["ticket"]


@admin.register(ContextSnapshot)
class ContextSnapshotAdmin(AppendOnlyAdmin):
    list_display = ["event", "created_at"]
    list_select_related = ["event__ticket"]


@admin.register(CompactionReview)
class CompactionReviewAdmin(AppendOnlyAdmin):
    list_display = ["event", "verdict", "by", "created_at"]
    list_filter = ["verdict"]
    list_select_related = ["event__ticket", "by"]
