"""The ledger's exchange format: one entry, as the webhook and `import_ledger` receive it.

`{"id", "ticket_id" or "order_id", "kind": "refund" | "charge" | "credit", "amount_cents", "currency",
"created_at", "external_ref"?}`. Validated here (pydantic) and nowhere else; the messages name the field.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

ENTRY_FIELDS = (
    "id",
    "ticket_id",
    "order_id",
    "kind",
    "amount_cents",
    "currency",
    "created_at",
    "external_ref",
)
_TEXT = r"^[^\x00-\x1f\x7f]+$"


class EntryIn(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: str = Field(min_length=1, max_length=200, pattern=_TEXT)
    ticket_id: str | None = Field(default=None, min_length=1, max_length=64, pattern=_TEXT)
    order_id: str | None = Field(default=None, min_length=1, max_length=64, pattern=_TEXT)
    kind: Literal["refund", "charge", "credit"]
    amount_cents: StrictInt = Field(gt=0, le=10**12)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    created_at: AwareDatetime
    external_ref: str | None = Field(default=None, max_length=200, pattern=_TEXT)

    @model_validator(mode="after")
    def _names_a_ticket_or_order(self) -> EntryIn:
        if not self.ticket_id and not self.order_id:
            raise ValueError("an entry needs ticket_id or order_id")
        return self

    @property
    def occurred_at(self) -> datetime:
        return self.created_at

    def raw(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def entry_errors(exc: ValidationError) -> list[str]:
    """A pydantic error as "field: message" lines (the entry's own field names)."""
    lines = []
    for error in exc.errors():
        field = ".".join(str(p) for p in error["loc"]) or "(entry)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = f"unknown field (an entry has {', '.join(ENTRY_FIELDS)})"
        elif error["type"] == "string_pattern_mismatch" and field == "currency":
            message = "a three-letter ISO 4217 code in capitals, such as USD"
        elif error["type"] == "string_pattern_mismatch":
            message = "must not contain control characters"
        lines.append(f"{field}: {message}")
    return lines


def parse_entry(data: object) -> EntryIn:
    """One entry from decoded JSON (or a CSV row as a dict); ValidationError or ValueError otherwise."""
    if not isinstance(data, dict):
        raise ValueError("an entry is a JSON object")
    return EntryIn.model_validate(data)


_INT = re.compile(r"^[0-9]{1,13}$")


def csv_row_to_json(row: dict[str, str | None]) -> dict[str, Any]:
    """A CSV row as the JSON entry it spells: empty cells are absent, amount_cents a number when it is one."""
    data: dict[str, Any] = {}
    for key, value in row.items():
        if key is None:  # more cells than columns
            data["(extra cells)"] = value
            continue
        if value is None or value.strip() == "":
            continue
        data[key.strip()] = value
    amount = data.get("amount_cents")
    if isinstance(amount, str) and _INT.match(amount.strip()):
        data["amount_cents"] = int(amount.strip())
    return data
