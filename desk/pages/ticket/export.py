"""The ticket as one JSON document, each figure as stored when it happened.

Written as it is read (`export_chunks`): the turns, events and state changes come from the database in batches
while the document is encoded, so a ticket of 50,000 turns is never held whole in memory, as rows or as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from compaction.models import CompactionEvent
from tickets.models import StateChange, Ticket, Turn

EXPORT_FORMAT = "sundry-ticket-export/2"
BATCH = 2000
# Compaction events are read in smaller batches: each carries its summary, coverage and errors (kilobytes,
# where a turn's row is a few hundred bytes), so a batch of them weighs about what a batch of turns does.
EVENT_BATCH = 200
CHUNK_BYTES = 64 * 1024


class Rows(list[Any]):
    """A JSON array whose rows are made while it is encoded. json's encoder (the Python one, which an indent
    selects) asks `not rows` first and then iterates: the first row is read to answer, so an empty one is
    still written `[]`. Iterated once."""

    def __init__(self, rows: Callable[[], Iterable[Any]]) -> None:
        super().__init__()
        self._make = rows
        self._rows: Iterator[Any] | None = None
        self._first: list[Any] = []

    def _start(self) -> Iterator[Any]:
        if self._rows is None:
            self._rows = iter(self._make())
            self._first = [row for row in [next(self._rows, _END)] if row is not _END]
        return self._rows

    def __bool__(self) -> bool:
        self._start()
        return bool(self._first)

    def __len__(self) -> int:  # only to answer truthiness consistently; the rows are not counted
        return 1 if self else 0

    def __iter__(self) -> Iterator[Any]:
        rows = self._start()
        yield from self._first
        self._first = []
        yield from rows


_END = object()


def export_chunks(document: dict[str, Any]) -> Iterator[bytes]:
    """The document as JSON with an indent of 2 (what JsonResponse wrote), in chunks of about CHUNK_BYTES."""
    pieces: list[str] = []
    size = 0
    for piece in json.JSONEncoder.iterencode(DjangoJSONEncoder(indent=2), document):
        pieces.append(piece)
        size += len(piece)
        if size >= CHUNK_BYTES:
            yield "".join(pieces).encode()
            pieces, size = [], 0
    if pieces:
        yield "".join(pieces).encode()


def ticket_export(ticket: Ticket) -> dict[str, Any]:
    """The ticket as one JSON document: its state, turns, compaction events (with their reviews) and
    state changes, each with the figures stored when it happened. The three lists are `Rows`, read in batches
    as the document is written (export_chunks); `list()` one to hold it."""
    ticket_class = ticket.ticket_class
    turns = Turn.objects.filter(ticket=ticket).select_related("posted_by").order_by("number")
    events = CompactionEvent.objects.filter(ticket=ticket).prefetch_related("reviews__by").order_by("number")
    changes = StateChange.objects.filter(ticket=ticket).select_related("actor").order_by("to_version")
    return {
        "format": EXPORT_FORMAT,
        "ticket": {
            "ticket_id": ticket.ticket_id,
            "order_id": ticket.order_id,
            "seller_type": ticket.seller_type,
            "status": ticket.status,
            "ticket_class": ticket_class.slug,
            "token_budget": ticket_class.token_budget,
            "threshold_tokens": ticket_class.threshold_tokens,
            "context_tokens": ticket.context_tokens,
            "turn_count": ticket.turn_count,
            "created_at": ticket.created_at,
            "updated_at": ticket.updated_at,
        },
        "state": ticket.pinned_state.agent_json(),
        "turns": Rows(
            lambda: (
                {
                    "number": t.number,
                    "role": t.role,
                    "content": t.content,
                    "tool": t.tool,
                    "args": t.args,
                    "tool_call_id": t.tool_call_id,
                    "boundary": t.boundary,
                    "tokens": t.tokens,
                    "context_tokens": t.context_tokens,
                    "token_budget": t.token_budget,
                    "threshold_tokens": t.threshold_tokens,
                    "posted_by": t.posted_by.username if t.posted_by else None,
                    "created_at": t.created_at,
                }
                for t in turns.iterator(chunk_size=BATCH)
            )
        ),
        "compactions": Rows(
            lambda: (
                {
                    "number": e.number,
                    "at_turn": e.at_turn,
                    "status": e.status,
                    "reason": e.reason,
                    "replaced_turns": [e.first_replaced_turn, e.last_replaced_turn]
                    if e.first_replaced_turn is not None
                    else None,
                    "tokens_before": e.tokens_before,
                    "tokens_after": e.tokens_after,
                    "threshold_tokens": e.threshold_tokens,
                    "token_budget": e.token_budget,
                    "attempts": e.attempts,
                    "validation_errors": e.validation_errors,
                    "summarizer_backend": e.summarizer_backend,
                    "summarizer_model": e.summarizer_model,
                    "latency_ms": e.latency_ms,
                    "summarizer_input_tokens": e.summarizer_input_tokens,
                    "summarizer_output_tokens": e.summarizer_output_tokens,
                    "cost_usd": str(e.cost_usd),
                    "summary": e.summary,
                    "coverage": e.coverage,
                    "created_at": e.created_at,
                    "reviews": [
                        {"verdict": r.verdict, "comment": r.comment, "by": r.by.username, "at": r.created_at}
                        for r in e.reviews.all()
                    ],
                }
                for e in events.iterator(chunk_size=EVENT_BATCH)
            )
        ),
        "state_changes": Rows(
            lambda: (
                {
                    "op": c.op,
                    "actor_kind": c.actor_kind,
                    "actor": c.actor.username if c.actor else None,
                    "from_version": c.from_version,
                    "to_version": c.to_version,
                    "at_turn": c.at_turn,
                    "thread_turn": c.thread_turn,
                    "reason": c.reason,
                    "change": c.change,
                    "created_at": c.created_at,
                }
                for c in changes.iterator(chunk_size=BATCH)
            )
        ),
    }
