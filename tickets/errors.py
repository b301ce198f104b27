"""What the services refuse, and why. Each error knows its HTTP status so the API maps it in one place."""

from __future__ import annotations

from typing import Any


class DeskError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def as_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.detail}


class InvalidInput(DeskError):
    status = 400
    code = "invalid"


class TicketNotFound(DeskError):
    status = 404
    code = "not_found"


class TicketAlreadyExists(DeskError):
    status = 409
    code = "ticket_exists"


class StaleVersion(DeskError):
    """A write carried a version of the pinned state that is no longer current."""

    status = 412
    code = "stale_version"


class RepeatRefused(DeskError):
    """A second irreversible action of the same tool on the same item, not marked as a deliberate repeat."""

    status = 409
    code = "repeat_refused"


class IdempotencyKeyReused(DeskError):
    """The same idempotency key with a different request body."""

    status = 422
    code = "idempotency_key_reused"


class IdempotencyKeyInFlight(DeskError):
    """A request with the same idempotency key is still being processed: retry once it has finished."""

    status = 409
    code = "idempotency_key_in_flight"
