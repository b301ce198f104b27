"""OpenAPI pieces shared by the views: documented error responses and request examples."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse

from desk.api.serializers import ErrorOut

ERROR_DESCRIPTIONS = {
    400: "Malformed body, unknown field, or a missing or malformed Idempotency-Key / If-Match.",
    401: "No token, or a bad one.",
    403: "The user's role may not do this (only agents write).",
    404: "No such ticket.",
    409: "Refused as a repeat of an earlier irreversible action (the body names it), a request with the "
    "same Idempotency-Key still in flight, or a ticket id already taken.",
    412: "If-Match names a version that is no longer current (the body carries the current state).",
    413: "The body is larger than the desk accepts.",
    422: "The Idempotency-Key was first used with a different body.",
    428: "If-Match is required here.",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: OpenApiResponse(ErrorOut, description=ERROR_DESCRIPTIONS[code]) for code in codes}


OPEN_TICKET_EXAMPLE = OpenApiExample(
    "Open T-40118",
    request_only=True,
    value={
        "ticket_id": "T-40118",
        "order_id": "SU-87310",
        "seller_type": "marketplace",
        "ticket_class": "standard-8k",
    },
)

TURN_EXAMPLES = [
    OpenApiExample(
        "Customer message",
        request_only=True,
        value={"role": "customer", "content": "Yes, $40 is fair. Please do."},
    ),
    OpenApiExample(
        "Tool call",
        request_only=True,
        value={
            "role": "tool_call",
            "tool": "issue_refund",
            "tool_call_id": "call_1",
            "args": {"order": "SU-87310", "item": "garden-table", "amount_cents": 4000},
        },
    ),
    OpenApiExample(
        "Agent reply completing a step",
        request_only=True,
        value={"role": "agent", "content": "Done: a $40 refund is on its way.", "boundary": "refund_issued"},
    ),
    OpenApiExample(
        "Appended, compaction applied",
        response_only=True,
        status_codes=["201"],
        value={
            "turn": 22,
            "tokens": 34,
            "context_tokens": 597,
            "threshold_tokens": 6400,
            "compaction": {
                "status": "applied",
                "number": 2,
                "at_turn": 22,
                "replaced_turns": [1, 21],
                "tokens_before": 7231,
                "tokens_after": 597,
                "coverage_missing": [],
            },
        },
    ),
]

ACTION_EXAMPLES = [
    OpenApiExample(
        "Reserve a refund before the tool runs",
        request_only=True,
        value={
            "tool": "issue_refund",
            "item": "garden-table",
            "amount_cents": 4000,
            "at_turn": 6,
            "status": "intended",
        },
    ),
    OpenApiExample(
        "Refund issued",
        request_only=True,
        value={
            "tool": "issue_refund",
            "item": "garden-table",
            "amount_cents": 4000,
            "at_turn": 6,
            "reversible": False,
            "args": {"order": "SU-87310"},
        },
    ),
    OpenApiExample(
        "Deliberate second refund",
        request_only=True,
        value={
            "tool": "issue_refund",
            "item": "garden-table",
            "amount_cents": 2000,
            "at_turn": 30,
            "reversible": False,
            "repeat_of_earlier": True,
            "reason": "a second scratch found on another leg",
        },
    ),
    OpenApiExample(
        "Repeat refused",
        response_only=True,
        status_codes=["409"],
        value={
            "error": "repeat_refused",
            "message": "refused: issue_refund of 4000 cents for garden-table at turn 6 was already recorded (A1); "
            'a second irreversible issue_refund for garden-table needs "repeat_of_earlier": true and a reason',
            "earlier_action": {
                "id": "A1",
                "tool": "issue_refund",
                "item": "garden-table",
                "amount_cents": 4000,
                "at_turn": 6,
            },
            "refunded_cents_total": 4000,
            "refused_attempt_id": 17,
        },
    ),
]

SETTLE_EXAMPLES = [
    OpenApiExample("The tool succeeded", request_only=True, value={"status": "succeeded"}),
    OpenApiExample(
        "The tool failed",
        request_only=True,
        value={"status": "failed", "reason": "payment provider declined: card expired"},
    ),
]

STATE_EXAMPLES = [
    OpenApiExample(
        "Constraint stated",
        request_only=True,
        value={"op": "constraint_stated", "text": "no replacement wanted", "at_turn": 3},
    ),
    OpenApiExample(
        "Question opened",
        request_only=True,
        value={
            "op": "question_opened",
            "text": "photo of the second item (parasol) still outstanding",
            "at_turn": 20,
        },
    ),
    OpenApiExample(
        "Question resolved", request_only=True, value={"op": "question_resolved", "text": "Q1", "at_turn": 24}
    ),
    OpenApiExample(
        "Decision made",
        request_only=True,
        value={"op": "decision_made", "text": "keep the table with a partial refund"},
    ),
]
