"""Last-resort answers: for the API, JSON when the database is unreachable (503), a bug escapes (500), the request
is malformed or its Host is not ours (400), or nothing is there (404), whatever Django produced them; for the
pages, the desk's own 404 page (in development too)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.defaults import bad_request as django_bad_request
from django.views.defaults import server_error as django_server_error

from tickets import telemetry

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
DATABASE_RETRY_AFTER_SECONDS = 5


def is_api(request: HttpRequest) -> bool:
    """Under /api/, however many slashes lead (`//api/v1/...` is the API's too)."""
    return ("/" + request.path.lstrip("/")).startswith(API_PREFIX)


def database_unavailable() -> JsonResponse:
    response = JsonResponse(
        {
            "error": "database_unavailable",
            "message": "the desk cannot reach its database; nothing was recorded, retry shortly",
        },
        status=503,
    )
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


class TraceContextMiddleware:
    """The desk's spans (compactions, guard decisions) made during a request that carries the agent's W3C
    `traceparent` are children of the agent's span (tickets/telemetry.py; nothing when tracing is off)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with telemetry.bind_trace_headers(request.headers):
            return self.get_response(request)


class ApiErrorsMiddleware:
    """An API request whose database is down is answered 503 in JSON, not Django's HTML 500 page; a chunked
    body is refused with 411 (never read as empty)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api(request) and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            # Behind a WSGI server a chunked body has no CONTENT_LENGTH and reads as empty: refuse it instead.
            return JsonResponse(
                {
                    "error": "length_required",
                    "message": "send the body with a Content-Length; chunked request bodies are not accepted",
                },
                status=411,
            )
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_api(request) and isinstance(exception, OperationalError | InterfaceError):
            logger.error("database unavailable on %s %s: %s", request.method, request.path, exception)
            return database_unavailable()
        return None


class PageNotFoundMiddleware:
    """A page's 404 (an unknown ticket, a compaction it does not have) is answered with the desk's own
    page: what was asked, a search box and the way back to the queue. Django's debug page would show
    the URL patterns instead, and only in development; the API keeps its JSON answers."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_api(request) or not isinstance(exception, Http404):
            return None
        return page_not_found(request, exception)


def page_not_found(
    request: HttpRequest, exception: Exception | None = None, template_name: str = "404.html"
) -> HttpResponse:
    """handler404 and the pages' 404: JSON under /api/ (`//api/...` included); elsewhere the desk's page, with
    the ticket asked for when there was one."""
    if is_api(request):
        return JsonResponse(
            {"error": "not_found", "message": f"nothing at {request.path[:200]}; the API is under /api/v1/"},
            status=404,
        )
    kwargs = request.resolver_match.kwargs if request.resolver_match else {}
    asked = str(kwargs.get("ticket_id", ""))[:64]
    return render(
        request,
        template_name,
        {"asked_ticket": asked, "asked_path": request.path[:300], "compaction": kwargs.get("number")},
        status=404,
    )


def server_error(request: HttpRequest, template_name: str = "500.html") -> HttpResponse:
    """handler500: JSON under /api/, Django's page elsewhere. Django has logged the exception already."""
    if is_api(request):
        return JsonResponse(
            {
                "error": "server_error",
                "message": "the desk failed to answer this request; it has been logged",
            },
            status=500,
        )
    return django_server_error(request, template_name)


def bad_request(request: HttpRequest, exception: Exception, template_name: str = "400.html") -> HttpResponse:
    """handler400 (a Host not in ALLOWED_HOSTS, a malformed request): JSON under /api/, Django's page elsewhere."""
    if is_api(request):
        return JsonResponse(
            {
                "error": "bad_request",
                "message": "the request is malformed or names a host this desk does not serve",
            },
            status=400,
        )
    return django_bad_request(request, exception, template_name)


def client_address(request: HttpRequest) -> str | None:
    """The client's address for throttling (logins and API tokens alike).

    REMOTE_ADDR, unless SUNDRY_TRUSTED_PROXIES says how many proxies in front of the desk append to
    X-Forwarded-For: then the entry the outermost trusted proxy appended (clients cannot forge it).
    """
    proxies = settings.SUNDRY_TRUSTED_PROXIES
    remote = request.META.get("REMOTE_ADDR") or None  # None only for requests made up in code (force_login)
    if proxies <= 0:
        return remote
    forwarded = [part.strip() for part in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    forwarded = [part for part in forwarded if part]
    if len(forwarded) < proxies:
        return remote
    return forwarded[-proxies]


def locked_out(request: HttpRequest, original_response: Any = None, credentials: Any = None) -> HttpResponse:
    """django-axes' answer to a locked-out login: our page with the cool-off in minutes, status 429."""
    username = ""
    if isinstance(credentials, dict):
        username = str(credentials.get("username") or "")
    elif request.method == "POST":
        username = str(request.POST.get("username", ""))
    minutes = max(1, math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    response = render(
        request,
        "registration/locked_out.html",
        {
            "username": username[:150],
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "cooloff_minutes": minutes,
        },
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    return response
