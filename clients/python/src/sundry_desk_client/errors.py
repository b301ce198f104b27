"""The desk's errors as exceptions. Each carries the desk's JSON body (`.body`), its `error` code (`.code`),
its `message`, the HTTP status, and how many attempts the client made (`.attempts`).

Every API error is JSON: `{"error": code, "message": ..., ...}`. The class is chosen by the code where the
code says more than the status (409 is a refused repeat, a key still in flight, or a ticket that exists).
"""

from __future__ import annotations

from typing import Any


class DeskError(Exception):
    """Anything the desk answered with an error, or a desk that could not be reached."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "",
        body: dict[str, Any] | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.body: dict[str, Any] = body or {}
        self.attempts = attempts

    def __str__(self) -> str:
        where = f"{self.status} {self.code}".strip()
        return f"{self.message} ({where})" if where else self.message


class DeskUnavailable(DeskError):
    """The desk could not be reached (connection refused, dropped, timed out) after every retry."""


class InvalidRequest(DeskError):
    """400: a malformed body or header. `.fields` maps each bad field to what was wrong with it."""

    @property
    def fields(self) -> dict[str, Any]:
        fields = self.body.get("fields")
        return fields if isinstance(fields, dict) else {}


class Unauthorized(DeskError):
    """401: no token, or a token the desk does not know."""


class Forbidden(DeskError):
    """403: the token's account has no role for this (only agents write through the API)."""


class NotFound(DeskError):
    """404: no such ticket (or action, or endpoint)."""


class Conflict(DeskError):
    """409 that is not one of the more precise cases below (e.g. settling an intent a second way)."""


class RepeatRefused(Conflict):
    """409 repeat_refused: a second irreversible action on the same item. Nothing was recorded or reserved.

    `.earlier_action` is the action that refused it (id, tool, item, amount_cents, at_turn, ...).
    """

    @property
    def earlier_action(self) -> dict[str, Any]:
        earlier = self.body.get("earlier_action")
        return earlier if isinstance(earlier, dict) else {}

    @property
    def refunded_cents_total(self) -> int | None:
        total = self.body.get("refunded_cents_total")
        return total if isinstance(total, int) else None


class BeliefStale(Conflict):
    """409 belief_stale: the figure the agent believed (`expects`) is not the desk's, or an unsettled intent may
    still move it. Nothing was reserved: re-read the state. `.body` has figure, expected, actual, actions."""

    @property
    def actual(self) -> int | None:
        value = self.body.get("actual")
        return value if isinstance(value, int) else None


class CapExceeded(Conflict):
    """409 cap_exceeded: the amount would pass one of the class's caps; `.body["headroom_cents"]` is what is left."""


class TicketExists(Conflict):
    """409 ticket_exists: a ticket with that id is already open."""


class IdempotencyInFlight(Conflict):
    """409 idempotency_key_in_flight: a request with the same key is still running (retried by the client)."""


class StaleVersion(DeskError):
    """412: the If-Match version is no longer the state's version (someone else changed it)."""


class PayloadTooLarge(DeskError):
    """413: the body is larger than the desk accepts."""


class IdempotencyConflict(DeskError):
    """422: the same Idempotency-Key was first used with a different body."""


class PreconditionRequired(DeskError):
    """428: this request needs If-Match."""


class RateLimited(DeskError):
    """429 after every retry."""


class ServerError(DeskError):
    """5xx after every retry."""


_BY_CODE: dict[str, type[DeskError]] = {
    "repeat_refused": RepeatRefused,
    "belief_stale": BeliefStale,
    "cap_exceeded": CapExceeded,
    "ticket_exists": TicketExists,
    "idempotency_key_in_flight": IdempotencyInFlight,
    "stale_version": StaleVersion,
    "idempotency_key_reused": IdempotencyConflict,
}
_BY_STATUS: dict[int, type[DeskError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    412: StaleVersion,
    413: PayloadTooLarge,
    422: IdempotencyConflict,
    428: PreconditionRequired,
    429: RateLimited,
}


def error_for(status: int, body: Any, *, text: str = "", attempts: int = 1) -> DeskError:
    """The exception for an error answer: by the body's code where it is known, else by the status."""
    data: dict[str, Any] = body if isinstance(body, dict) else {}
    code = str(data.get("error") or "")
    message = str(data.get("message") or text.strip()[:500] or f"the desk answered HTTP {status}")
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else DeskError
    return cls(message, status=status, code=code, body=data, attempts=attempts)
