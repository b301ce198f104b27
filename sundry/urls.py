from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path, re_path

from desk.api.views import not_found

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("desk.api.urls")),
    # /api, /api/v1 (no slash), /api/v2/...: JSON 404s, never an HTML page or a slash-appending redirect.
    re_path(r"^api(?:/.*)?$", not_found),
    path("", include("desk.pages.urls")),
]

handler404 = "desk.middleware.page_not_found"
handler500 = "desk.middleware.server_error"
handler400 = "desk.middleware.bad_request"
