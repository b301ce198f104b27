"""The desk's URLs plus the plain views under /plain/ (served only by bench.settings)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from bench import plain_views
from sundry.urls import urlpatterns as desk_urlpatterns

urlpatterns: list[URLPattern | URLResolver] = [
    path("ps/tickets/<str:ticket_id>/state/", plain_views.ps_state),
    path("ps/tickets/<str:ticket_id>/context/", plain_views.ps_context),
    path("plain/tickets/<str:ticket_id>/state/", plain_views.state),
    path("plain/tickets/<str:ticket_id>/context/", plain_views.context),
    path("plain/tickets/<str:ticket_id>/turns/", plain_views.turn),
    path("plain/tickets/<str:ticket_id>/actions/", plain_views.action),
    *desk_urlpatterns,
]
