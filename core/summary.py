"""The Summary a summarizer must return, and the fixed template that asks for it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.tokens import compact_json


class Summary(BaseModel):
    """Four required fields and a narrative. An empty list is a statement; a missing field is a failed call."""

    model_config = ConfigDict(extra="ignore")

    decisions: list[str]
    actions_taken: list[str]
    customer_constraints: list[str]
    open_questions: list[str]
    narrative: str = Field(max_length=20000)


def parse_summary(text: str) -> Summary:
    """A summarizer's reply as a Summary; raises pydantic's ValidationError when it is not one.

    Small models write raw newlines and tabs inside JSON strings (SmolLM2 does at temperature 0, the same way on
    every retry), which strict JSON refuses: a reply that parses only with control characters allowed in strings
    is read that way, then validated like any other. Anything else is validated as sent."""
    try:
        return Summary.model_validate_json(text)
    except ValueError:
        try:
            lenient = json.loads(text, strict=False)
        except ValueError:
            lenient = None
        if not isinstance(lenient, dict):
            raise
        return Summary.model_validate_json(json.dumps(lenient))


SUMMARY_FIELDS = ("decisions", "actions_taken", "customer_constraints", "open_questions")

# The JSON schema sent to OpenAI-compatible servers (strict mode wants every field required and no others).
SUMMARY_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        **{name: {"type": "array", "items": {"type": "string"}} for name in SUMMARY_FIELDS},
        "narrative": {"type": "string"},
    },
    "required": [*SUMMARY_FIELDS, "narrative"],
    "additionalProperties": False,
}

SUMMARIZER_INSTRUCTIONS = """\
You compact the early part of a customer-support ticket so that an agent can continue it.
Return one JSON object with exactly these fields:
- decisions: decisions already made, one short string each;
- actions_taken: actions already taken, with tool, item and amount (money moved, returns booked, messages sent);
- customer_constraints: every constraint the customer stated, even in passing;
- open_questions: what the thread is still waiting for;
- narrative: at most 120 words of prose for everything else.
Every action, constraint, open question and decision in the pinned state must appear in its field: the pinned
state rides in every request, so refer to each pinned item by its id (A1, C2, Q1, D3) instead of restating it,
and write out in full only what the turns add that the pinned state does not carry.
An empty list means there are none. Be aggressive about texture and absolute about the four fields."""


def summary_user_prompt(
    *, pinned_state: dict[str, Any], previous_summary: dict[str, Any] | None, transcript: str
) -> str:
    previous = compact_json(previous_summary) if previous_summary else "none"
    return (
        f"Pinned state (authoritative):\n{compact_json(pinned_state)}\n\n"
        f"Previous summary (fold it in):\n{previous}\n\n"
        f"Turns to replace:\n{transcript}"
    )
