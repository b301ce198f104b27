"""The base of what the desk refuses, and the one refusal pure code raises: input that does not fit.

Domain errors carry no HTTP status: each interface maps them in one place (the API in desk/api/exceptions.py,
the pages in their forms). The services' other refusals are in tickets/errors.py.
"""

from __future__ import annotations

from typing import Any


class DeskError(Exception):
    code = "invalid"

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def as_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.detail}


class InvalidInput(DeskError):
    code = "invalid"
