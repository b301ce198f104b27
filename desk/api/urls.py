from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import URLPattern, URLResolver, path, re_path
from django.utils.csp import CSP
from django.views.decorators.csp import csp_override
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from desk.api import ledger, views

DOCS_CSP: dict[str, Any] = {**settings.SECURE_CSP, "style-src": [CSP.SELF, CSP.UNSAFE_INLINE]}

urlpatterns: list[URLPattern | URLResolver] = [
    path("tickets/", views.TicketListView.as_view(), name="api-tickets"),
    path("tickets/<str:ticket_id>/", views.TicketDetailView.as_view(), name="api-ticket"),
    path("tickets/<str:ticket_id>/turns/", views.TurnListView.as_view(), name="api-turns"),
    path("tickets/<str:ticket_id>/state/", views.StateView.as_view(), name="api-state"),
    path("tickets/<str:ticket_id>/actions/", views.ActionListView.as_view(), name="api-actions"),
    path(
        "tickets/<str:ticket_id>/actions/<str:action_id>/",
        views.ActionDetailView.as_view(),
        name="api-action",
    ),
    path("tickets/<str:ticket_id>/history/", views.HistoryView.as_view(), name="api-history"),
    path("tickets/<str:ticket_id>/handoffs/", views.HandoffListView.as_view(), name="api-handoffs"),
    path("tickets/<str:ticket_id>/context/", views.ContextView.as_view(), name="api-context"),
    path("tickets/<str:ticket_id>/compactions/", views.CompactionListView.as_view(), name="api-compactions"),
    # Signed by the payment system, not behind agent token auth (desk/api/ledger.py).
    path("ledger/", ledger.ledger_webhook, name="api-ledger"),
    # The schema and its docs are public: they describe the API, they do not read tickets.
    path("schema/", SpectacularAPIView.as_view(permission_classes=[AllowAny]), name="api-schema"),
    # Swagger UI: the split view loads its start-up code as a script file (no inline script); its page
    # has one inline <style> block, so this page alone allows inline styles.
    path(
        "docs/",
        csp_override(DOCS_CSP)(
            SpectacularSwaggerSplitView.as_view(url_name="api-schema", permission_classes=[AllowAny])
        ),
        name="api-docs",
    ),
    re_path(r"^(?P<path>.*)$", views.not_found),
]
