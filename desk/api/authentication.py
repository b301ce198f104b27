"""Agents' token authentication: hashed tokens, roles read in the same query, failures throttled.

A valid token is never refused because others failed. Failures are counted in the database (every worker
sees the same count) per subject: the token prefix presented when a token with that prefix exists (a revoked
key in a retry loop throttles itself, not the fleet behind its egress address), else the client address
(someone guessing keys). A subject over the limit gets 429 with Retry-After until its cool-off ends.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from desk.middleware import client_address
from tickets.accounts import TOKEN_PREFIX_LENGTH, authenticate_agent_token, known_token_prefix
from tickets.models import AuthFailure

KEYWORD = "Token"


class TooManyFailures(exceptions.Throttled):
    default_code = "too_many_failed_authentications"


def failure_subject(key: str, address: str) -> str:
    """Whose failure this is: the token prefix when such a token exists, else the address."""
    if key and known_token_prefix(key):
        return f"token:{key[:TOKEN_PREFIX_LENGTH]}"
    return f"address:{address}"[:80]


def _blocked_for(subject: str) -> float:
    """Seconds this subject must still wait, or 0."""
    now = timezone.now()
    until = (
        AuthFailure.objects.filter(
            subject=subject, count__gte=settings.SUNDRY_API_AUTH_FAILURE_LIMIT, window_ends_at__gt=now
        )
        .values_list("window_ends_at", flat=True)
        .first()
    )
    return (until - now).total_seconds() if until else 0.0


def _record_failure(subject: str) -> None:
    """Failures count inside a window that starts at the first one and lasts the cool-off."""
    now = timezone.now()
    window = now + timedelta(seconds=settings.SUNDRY_API_AUTH_COOLOFF_SECONDS)
    with transaction.atomic():
        row, created = AuthFailure.objects.select_for_update().get_or_create(
            subject=subject, defaults={"count": 1, "window_ends_at": window}
        )
        if created:
            return
        if row.window_ends_at <= now:
            row.count, row.window_ends_at = 1, window
        else:
            row.count += 1
        row.save(update_fields=["count", "window_ends_at"])


def _refuse(subject: str, message: str) -> exceptions.APIException:
    wait = _blocked_for(subject)
    if wait:
        who = subject.split(":", 1)[1]
        return TooManyFailures(
            wait=math.ceil(wait),
            detail=f"too many failed token authentications for {who}; retry in {math.ceil(wait)} s",
        )
    _record_failure(subject)
    return exceptions.AuthenticationFailed(message)


class HashedTokenAuthentication(BaseAuthentication):
    """`Authorization: Token <key>`. A valid token always authenticates; failures are counted per subject
    (failure_subject), and a subject over the limit gets 429 with Retry-After until its cool-off ends."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        address = client_address(request._request) or "unknown"
        if len(parts) != 2:
            raise _refuse(
                f"address:{address}"[:80], "the Authorization header must be `Token <key>`, one key"
            )
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError:
            key = ""
        agent = authenticate_agent_token(key=key) if key else None
        if agent is None:
            raise _refuse(failure_subject(key, address), "invalid or revoked token")
        return agent.user, agent.token

    def authenticate_header(self, request: Request) -> str:
        return KEYWORD


class HashedTokenScheme(OpenApiAuthenticationExtension):
    """How the schema describes the token header."""

    target_class = HashedTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>`, the key printed by `manage.py create_agent NAME`",
        }
