"""Every API error is JSON: `{"error": code, "message": words, ...}`. This is the one place that maps them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from core.errors import DeskError, InvalidInput
from tickets.errors import (
    ActionAlreadySettled,
    ActionNotFound,
    BeliefStale,
    CapExceeded,
    ClassNotAllowed,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    NotIntentOwner,
    RepeatRefused,
    StaleVersion,
    TicketAlreadyExists,
    TicketNotFound,
)

# The one place a domain error becomes an HTTP status.
DESK_ERROR_STATUS: dict[type[DeskError], int] = {
    InvalidInput: status.HTTP_400_BAD_REQUEST,
    TicketNotFound: status.HTTP_404_NOT_FOUND,
    ActionNotFound: status.HTTP_404_NOT_FOUND,
    ActionAlreadySettled: status.HTTP_409_CONFLICT,
    TicketAlreadyExists: status.HTTP_409_CONFLICT,
    RepeatRefused: status.HTTP_409_CONFLICT,
    BeliefStale: status.HTTP_409_CONFLICT,
    CapExceeded: status.HTTP_409_CONFLICT,
    NotIntentOwner: status.HTTP_403_FORBIDDEN,
    ClassNotAllowed: status.HTTP_403_FORBIDDEN,
    IdempotencyKeyInFlight: status.HTTP_409_CONFLICT,
    StaleVersion: status.HTTP_412_PRECONDITION_FAILED,
    IdempotencyKeyReused: status.HTTP_422_UNPROCESSABLE_ENTITY,
}


def status_of(exc: DeskError) -> int:
    for cls in type(exc).__mro__:
        if cls in DESK_ERROR_STATUS:
            return DESK_ERROR_STATUS[cls]  # type: ignore[index]
    return status.HTTP_400_BAD_REQUEST


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "the request body is larger than the desk accepts"
    default_code = "payload_too_large"


class PreconditionRequired(exceptions.APIException):
    status_code = status.HTTP_428_PRECONDITION_REQUIRED
    default_detail = "this request needs an If-Match header with the ETag (version) of the state you read"
    default_code = "precondition_required"


class BadQueryParameter(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "a query parameter is malformed"
    default_code = "invalid"


class BadHeader(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "a header is missing or malformed"
    default_code = "bad_header"


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    """ValidationError detail as "field: message" lines."""
    if isinstance(detail, dict):
        lines: list[str] = []
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            lines.extend(_flatten(value, "" if key == "non_field_errors" else name))
        return lines
    if isinstance(detail, list):
        lines = []
        for value in detail:
            lines.extend(_flatten(value, prefix))
        return lines
    return [f"{prefix}: {detail}" if prefix else str(detail)]


def _code(exc: exceptions.APIException) -> str:
    if isinstance(exc, exceptions.ValidationError):
        return "invalid"
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def desk_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DeskError):
        set_rollback()
        return Response(exc.as_json(), status=status_of(exc))
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(
            f"the request body is larger than the desk accepts (at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes)"
        )
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response  # not ours to answer: Django turns it into a 500 and logs it
    body: dict[str, Any] = {"error": _code(exc), "message": "; ".join(_flatten(exc.detail)) or str(exc)}
    if isinstance(exc, exceptions.ValidationError):
        body["fields"] = exc.detail
    response.data = body
    return response
