"""What the services refuse, and why (the base and the invalid input, which pure code raises too, are in
core/errors.py). Domain errors carry no HTTP status: each interface maps them
in one place (the API in desk/api/exceptions.py, the pages in their forms)."""

from __future__ import annotations

from pydantic import ValidationError

from core.errors import DeskError


class TicketNotFound(DeskError):
    code = "not_found"


class TicketAlreadyExists(DeskError):
    code = "ticket_exists"


class StaleVersion(DeskError):
    """A write carried a version of the pinned state that is no longer current."""

    code = "stale_version"


class RepeatRefused(DeskError):
    """A second irreversible action of the same tool on the same item, not marked as a deliberate repeat."""

    code = "repeat_refused"


class BeliefStale(DeskError):
    """The agent's belief about the ticket's money (`expects`) is not the desk's: the tool must not run."""

    code = "belief_stale"


class CapExceeded(DeskError):
    """The action would take a money total past one of the class's caps."""

    code = "cap_exceeded"


class NotIntentOwner(DeskError):
    """Only the agent that reserved an intent, or a supervisor, settles it."""

    code = "not_intent_owner"


class ClassNotAllowed(DeskError):
    """The agent token is scoped to other ticket classes than this ticket's (or the class asked for)."""

    code = "class_not_allowed"


class IdempotencyKeyReused(DeskError):
    """The same idempotency key with a different request body."""

    code = "idempotency_key_reused"


class IdempotencyKeyInFlight(DeskError):
    """A request with the same idempotency key is still being processed: retry once it has finished."""

    code = "idempotency_key_in_flight"


class ActionNotFound(DeskError):
    """No action with that id on the ticket."""

    code = "action_not_found"


class ActionAlreadySettled(DeskError):
    """An intent settled one way cannot be settled the other way."""

    code = "already_settled"


def describe_validation_error(exc: ValidationError) -> str:
    """A pydantic error as "field.path: message; ..." for the people who sent the data."""
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or '(root)'}: {error['msg']}" for error in exc.errors()
    )
