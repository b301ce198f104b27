"""The desk's URLs plus one API view with a bug, to see the last-resort 500 answer."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from sundry.urls import handler500
from sundry.urls import urlpatterns as desk_urlpatterns


def broken(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(1 / len(request.GET)))  # ZeroDivisionError without a query string


urlpatterns = [path("api/v1/broken/", broken), path("broken/", broken), *desk_urlpatterns]

__all__ = ["handler500", "urlpatterns"]
