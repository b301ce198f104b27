"""Agents' token authentication: hashed tokens, roles read in the same query, failures throttled per address."""

from __future__ import annotations

import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from desk.middleware import client_address
from tickets.accounts import authenticate_agent_token

KEYWORD = "Token"


class TooManyFailures(exceptions.Throttled):
    default_code = "too_many_failed_authentications"


def _failures_key(address: str) -> str:
    return f"desk:api-auth-failures:{address}"


def _blocked_for(address: str) -> float:
    """Seconds this address must still wait, or 0."""
    entry = cache.get(_failures_key(address))
    if not entry:
        return 0.0
    count, until = entry
    remaining = until - time.time()
    if count >= settings.SUNDRY_API_AUTH_FAILURE_LIMIT and remaining > 0:
        return remaining
    return 0.0


def _record_failure(address: str) -> None:
    """Failures count inside a window that starts at the first one and lasts the cool-off."""
    key = _failures_key(address)
    now = time.time()
    entry = cache.get(key)
    if entry and entry[1] > now:
        count, until = entry[0] + 1, entry[1]
    else:
        count, until = 1, now + settings.SUNDRY_API_AUTH_COOLOFF_SECONDS
    cache.set(key, (count, until), timeout=max(1, math.ceil(until - now)))


class HashedTokenAuthentication(BaseAuthentication):
    """`Authorization: Token <key>`. Only failures are counted; an address over the limit gets 429 with
    Retry-After until its cool-off ends, whatever token it sends."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        address = client_address(request._request) or "unknown"
        wait = _blocked_for(address)
        if wait:
            raise TooManyFailures(
                wait=math.ceil(wait),
                detail=f"too many failed token authentications from {address}; retry in {math.ceil(wait)} s",
            )
        if len(parts) != 2:
            _record_failure(address)
            raise exceptions.AuthenticationFailed("the Authorization header must be `Token <key>`, one key")
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError:
            key = ""
        agent = authenticate_agent_token(key=key) if key else None
        if agent is None:
            _record_failure(address)
            raise exceptions.AuthenticationFailed("invalid or revoked token")
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
