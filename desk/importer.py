"""The `sundry-ticket/1` import format: parse and validate a whole file first, then write ticket by ticket.

A file is first checked: every ticket written in one transaction that is rolled back, compaction skipped
(compaction never decides whether an event is accepted), so a refusal of syntax or meaning writes nothing.
Then each ticket is written as a live agent would write it: turn by turn through `receive_turn`, each turn
its own durable transaction, its compaction after the commit with no transaction open, so an imported
ticket is compacted exactly as it would have been live and no summarizer call holds a row lock.

One module although over 400 lines: one format read and written, the parse feeding the write; the
limits and the strict parser are the API's own (desk.api.parsers).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Annotated, Any, Literal

from django.conf import settings
from django.db import transaction
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from rest_framework import exceptions as drf_exceptions

from core.errors import DeskError
from core.identity import CatalogError, ToolCatalog, default_irreversible_tools, default_money_tools
from core.state import Provenance
from core.vocabulary import IMPORT_EVENT_OPS, THREAD_ROLES, StateOp, SummarizerBackend, TurnOutcome, TurnRole
from desk.api.parsers import loads_strict
from desk.turns import TurnReceived, receive_turn, rehearse_turn
from tickets.errors import RepeatRefused, describe_validation_error
from tickets.models import TicketClass, Turn
from tickets.services.actions import record_action
from tickets.services.actors import SYSTEM, Actor
from tickets.services.lifecycle import open_ticket
from tickets.services.state_changes import change_state


def _import_event_op(op: StateOp) -> StateOp:
    if op not in IMPORT_EVENT_OPS:
        raise ValueError(f"an imported event is one of {', '.join(IMPORT_EVENT_OPS)}")
    return op


def _thread_role(role: TurnRole) -> TurnRole:
    if role not in THREAD_ROLES:
        raise ValueError(f"a turn's role is one of {', '.join(THREAD_ROLES)}")
    return role


class ImportEvent(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Annotated[StateOp, AfterValidator(_import_event_op)]
    text: str | None = None
    tool: str | None = None
    item: str = ""
    amount_cents: int = Field(default=0, ge=0)
    at_turn: int | None = Field(default=None, ge=1)
    reversible: bool = False
    args: dict[str, Any] | None = None
    idempotency_key: str | None = None
    repeat_of_earlier: bool = False
    reason: str = ""
    expect_refused: bool = False
    # How the desk knows it (core.state.PROVENANCES); not said when absent.
    source: Provenance | None = None


class ImportTurn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Annotated[TurnRole, AfterValidator(_thread_role)]
    content: str = ""
    tool: str = ""
    args: dict[str, Any] | None = None
    tool_call_id: str = ""
    boundary: str = ""
    events: list[ImportEvent] = Field(default_factory=list)


class ImportClass(BaseModel):
    model_config = ConfigDict(extra="allow")

    slug: str = Field(min_length=1, max_length=64, pattern=r"^[-a-zA-Z0-9_]+$")
    token_budget: int = Field(ge=256)
    compaction_threshold: float = Field(gt=0, le=1)
    keep_recent_tokens: int | None = Field(default=None, ge=0)
    summarizer_backend: Literal["extractive", "openai", "scripted"] | None = None
    summarizer_model: str | None = None
    # The class's tool catalog (SPEC section 5); the defaults when absent.
    irreversible_tools: list[str] | None = None
    money_tools: dict[str, str] | None = None


class ImportTicket(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: Literal["sundry-ticket/1"] = "sundry-ticket/1"
    ticket_id: str = Field(min_length=1, max_length=64)
    order_id: str = Field(min_length=1, max_length=64)
    seller_type: str = Field(min_length=1, max_length=40)
    ticket_class: str | ImportClass
    system_prompt: str | None = None
    turns: list[ImportTurn] = Field(default_factory=list)


class ImportFileError(Exception):
    """A file that cannot be imported, with the file, the ticket and the field named."""


@dataclass
class TicketImported:
    ticket_id: str
    turns: int = 0
    actions_recorded: int = 0
    refused_as_expected: int = 0
    compactions: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        compactions = ", ".join(f"{n} {status}" for status, n in sorted(self.compactions.items())) or "none"
        return (
            f"{self.ticket_id}: {self.turns} turns, {self.actions_recorded} actions recorded, "
            f"{self.refused_as_expected} refused as expected, compactions: {compactions}"
        )


def _strict(text: str, where: str) -> Any:
    """The API's parser (duplicate keys, NaN/Infinity, numbers past 64 bits refused), errors as ImportFileError,
    and a nesting limit, so no input ends in a traceback."""
    try:
        data = loads_strict(text)
    except drf_exceptions.ValidationError as exc:
        detail = exc.detail
        if isinstance(detail, dict):
            field, messages = next(iter(detail.items()))
            message = messages[0] if isinstance(messages, list) and messages else messages
            raise ImportFileError(f"{where}: {field}: {message}") from None
        raise ImportFileError(f"{where}: {detail}") from None
    except drf_exceptions.ParseError as exc:
        raise ImportFileError(f"{where}: {str(exc.detail).replace('the body is ', '')}") from None
    deepest = _too_deep(data, settings.SUNDRY_IMPORT_MAX_DEPTH)
    if deepest is not None:
        raise ImportFileError(
            f"{where}: {deepest or 'the document'} is nested deeper than {settings.SUNDRY_IMPORT_MAX_DEPTH} levels"
        )
    return data


def _too_deep(data: Any, limit: int) -> str | None:
    """The path of the first value nested deeper than `limit`, or None; iterative, whatever the depth."""
    pending: list[tuple[str, Any, int]] = [("", data, 0)]
    while pending:
        path, value, depth = pending.pop()
        if isinstance(value, dict | list) and depth >= limit:
            return path
        if isinstance(value, dict):
            pending.extend((f"{path}.{key}" if path else key, item, depth + 1) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((f"{path}[{index}]", item, depth + 1) for index, item in enumerate(value))
    return None


def _objects(data: Any, source: str) -> list[dict[str, Any]]:
    documents = data if isinstance(data, list) else [data]
    for index, doc in enumerate(documents):
        if not isinstance(doc, dict):
            raise ImportFileError(
                f"{source}: ticket #{index + 1} is a {type(doc).__name__}, not a JSON object"
            )
    return documents


def _is_one_object(line: str) -> bool:
    """The first line of JSON Lines is a whole object by itself; the first line of a pretty-printed one is not."""
    stripped = line.strip()
    if not stripped.startswith("{"):
        return False
    try:
        return isinstance(json.loads(stripped), dict)
    except (ValueError, RecursionError):
        return False


def _line_documents(lines: Iterable[str], source: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        doc = _strict(line, f"{source}: line {number}")
        if not isinstance(doc, dict):
            raise ImportFileError(f"{source}: line {number} is a {type(doc).__name__}, not a JSON object")
        yield doc


def parse_documents(text: str, *, source: str) -> list[dict[str, Any]]:
    """A file holds one ticket object, a list of them, or JSON Lines."""
    stripped = text.strip()
    if not stripped:
        raise ImportFileError(f"{source}: the file is empty")
    lines = stripped.splitlines()
    if len(lines) > 1 and _is_one_object(lines[0]):
        return list(_line_documents(lines, source))
    return _objects(_strict(stripped, source), source)


def validate_document(doc: dict[str, Any], *, source: str, index: int) -> ImportTicket:
    label = doc.get("ticket_id") or f"#{index + 1} (no ticket_id)"
    try:
        return ImportTicket.model_validate(doc)
    except ValidationError as exc:
        raise ImportFileError(f"{source}: ticket {label}: {describe_validation_error(exc)}") from None


def validate_documents(documents: list[dict[str, Any]], *, source: str) -> list[ImportTicket]:
    return list(
        _unique((validate_document(d, source=source, index=i) for i, d in enumerate(documents)), source)
    )


def _unique(tickets: Iterable[ImportTicket], source: str) -> Iterator[ImportTicket]:
    seen: set[str] = set()
    for ticket in tickets:
        if ticket.ticket_id in seen:
            raise ImportFileError(f"{source}: ticket {ticket.ticket_id}: appears twice in the file")
        seen.add(ticket.ticket_id)
        yield ticket


def iter_tickets(path: Path) -> Iterator[ImportTicket]:
    """The file's tickets one at a time: JSON Lines are read and validated line by line (memory holds one
    ticket, not the file); a single object or a list is read whole, under the size limit."""
    source = str(path)
    limit = settings.SUNDRY_IMPORT_MAX_BYTES
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ImportFileError(f"{source}: cannot read: {exc}") from None
    if size > limit:
        raise ImportFileError(
            f"{source}: the file is {size} bytes, over the {limit}-byte limit (SUNDRY_IMPORT_MAX_BYTES); "
            "split it into several files"
        )
    try:
        with path.open(encoding="utf-8") as handle:
            first = ""
            for first in handle:
                if first.strip():
                    break
            if not first.strip():
                raise ImportFileError(f"{source}: the file is empty")
            second = handle.readline()
            while second and not second.strip():
                second = handle.readline()
            if second and _is_one_object(first):
                lines = chain([first, second], handle)
                docs: Iterable[dict[str, Any]] = _line_documents(lines, source)
            else:
                docs = _objects(_strict(first + second + handle.read(), source), source)
            yield from _unique(
                (validate_document(doc, source=source, index=i) for i, doc in enumerate(docs)), source
            )
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{source}: cannot read: {exc}") from None


def load_file(path: Path) -> list[ImportTicket]:
    return list(iter_tickets(path))


def resolve_class(spec: str | ImportClass) -> TicketClass:
    """A slug names an existing class; an object creates one unless its slug exists (then it is used as it is)."""
    if isinstance(spec, str):
        found = TicketClass.objects.filter(slug=spec).first()
        if found is None:
            raise DeskError(f"ticket_class: no class with slug {spec!r}", field="ticket_class")
        return found
    existing = TicketClass.objects.filter(slug=spec.slug).first()
    if existing is not None:
        return existing
    fields: dict[str, Any] = {
        "slug": spec.slug,
        "token_budget": spec.token_budget,
        "compaction_threshold": spec.compaction_threshold,
    }
    if spec.keep_recent_tokens is not None:
        fields["keep_recent_tokens"] = spec.keep_recent_tokens
    if spec.summarizer_backend is not None:
        fields["summarizer_backend"] = SummarizerBackend(spec.summarizer_backend)
    if spec.summarizer_model is not None:
        fields["summarizer_model"] = spec.summarizer_model
    if spec.irreversible_tools is not None or spec.money_tools is not None:
        irreversible = (
            spec.irreversible_tools if spec.irreversible_tools is not None else default_irreversible_tools()
        )
        money = spec.money_tools if spec.money_tools is not None else default_money_tools()
        try:
            ToolCatalog.build(irreversible=irreversible, money=money)
        except CatalogError as exc:
            raise DeskError(f"ticket_class: {exc}", field="ticket_class") from None
        fields["irreversible_tools"] = irreversible
        fields["money_tools"] = money
    return TicketClass.objects.create(**fields)


class _RolledBack(Exception):
    pass


def check_tickets(docs: Iterable[ImportTicket], *, by: Actor = SYSTEM, source: str = "") -> None:
    """Write `docs` in one transaction that is rolled back, compaction skipped: ImportFileError at the first
    refusal, and the database as it was either way."""
    try:
        with transaction.atomic(durable=True):
            for doc in docs:
                _write(doc, by=by, source=source, mode="check")
            raise _RolledBack
    except _RolledBack:
        pass


def import_ticket(
    doc: ImportTicket, *, by: Actor = SYSTEM, source: str = "", checked: bool = False
) -> TicketImported:
    """Write one ticket, turn by turn, with its events, as a live agent would have.

    Checked first (`checked=True` when the caller checked it with its file), so a refusal writes nothing;
    then each turn commits on its own and its compaction runs after the commit.
    """
    if not checked:
        check_tickets([doc], by=by, source=source)
    return _write(doc, by=by, source=source, mode="live")


def import_ticket_rolled_back(doc: ImportTicket, *, by: Actor = SYSTEM, source: str = "") -> TicketImported:
    """Write one ticket, compactions included, inside the caller's transaction, which the caller rolls back
    (the evals measure a compaction and leave nothing). The summarizer runs in that transaction: only on a
    ticket no other session can see."""
    return _write(doc, by=by, source=source, mode="rehearsal")


def _write(
    doc: ImportTicket, *, by: Actor, source: str, mode: Literal["check", "live", "rehearsal"]
) -> TicketImported:
    prefix = f"{source}: " if source else ""
    report = TicketImported(ticket_id=doc.ticket_id)
    try:
        ticket_class = resolve_class(doc.ticket_class)
        ticket = open_ticket(
            ticket_id=doc.ticket_id,
            order_id=doc.order_id,
            seller_type=doc.seller_type,
            ticket_class=ticket_class,
            system_prompt=doc.system_prompt,
            by=by,
        )
    except DeskError as exc:
        raise ImportFileError(f"{prefix}ticket {doc.ticket_id}: {exc.message}") from None

    counted: set[tuple[str, int]] = set()
    for index, turn_doc in enumerate(doc.turns, start=1):
        where = f"{prefix}ticket {doc.ticket_id}: turns.{index - 1}"

        def apply_events(turn: Turn, turn_doc: ImportTurn = turn_doc, where: str = where) -> None:
            for event_index, event in enumerate(turn_doc.events):
                _apply_event(
                    ticket,
                    event,
                    turn_number=turn.number,
                    event_index=event_index,
                    by=by,
                    where=f"{where}.events.{event_index}",
                    report=report,
                )

        fields: dict[str, Any] = {
            "ticket": ticket,
            "role": turn_doc.role,
            "content": turn_doc.content,
            "tool": turn_doc.tool,
            "args": turn_doc.args,
            "tool_call_id": turn_doc.tool_call_id,
            "boundary": turn_doc.boundary,
            "extra": turn_doc.model_extra or {},
            "with_turn": apply_events,
            "by": by,
        }
        try:
            received: TurnReceived = (
                receive_turn(**fields)
                if mode == "live"
                else rehearse_turn(**fields, compact=mode == "rehearsal")
            )
        except DeskError as exc:
            field = exc.detail.get("field")
            raise ImportFileError(f"{where}{'.' + field if field else ''}: {exc.message}") from None
        report.turns += 1
        outcome = received.compaction
        if outcome.status != TurnOutcome.NOT_DUE:
            # A deferral stays open over several turns: count events, not the turns that saw them.
            key = (outcome.status, outcome.event.number if outcome.event else -received.turn.number)
            if key not in counted:
                counted.add(key)
                report.compactions[outcome.status] = report.compactions.get(outcome.status, 0) + 1
    return report


def _apply_event(
    ticket: Any,
    event: ImportEvent,
    *,
    turn_number: int,
    event_index: int,
    by: Actor,
    where: str,
    report: TicketImported,
) -> None:
    at_turn = event.at_turn or turn_number
    source = event.source
    try:
        if event.type == StateOp.ACTION_TAKEN:
            if not event.tool:
                raise ImportFileError(f"{where}.tool: an action_taken event needs its tool")
            try:
                record_action(
                    ticket=ticket,
                    tool=event.tool,
                    item=event.item,
                    amount_cents=event.amount_cents,
                    at_turn=at_turn,
                    reversible=event.reversible,
                    args=event.args,
                    idempotency_key=event.idempotency_key
                    or f"import-{ticket.ticket_id}-{turn_number}-{event_index}",
                    repeat_of_earlier=event.repeat_of_earlier,
                    reason=event.reason,
                    by=by,
                    source=source,
                )
            except RepeatRefused as refused:
                if event.expect_refused:
                    report.refused_as_expected += 1
                    return
                # A repeat's message already opens with "refused:"; say it once.
                message = refused.message.removeprefix("refused: ")
                raise ImportFileError(f"{where}: refused: {message}") from None
            if event.expect_refused:
                raise ImportFileError(
                    f"{where}: expected the desk to refuse this action, but it was recorded"
                )
            report.actions_recorded += 1
            return
        if not event.text:
            raise ImportFileError(f"{where}.text: a {event.type} event needs its text")
        change_state(ticket=ticket, op=event.type, text=event.text, at_turn=at_turn, by=by, source=source)
    except DeskError as exc:
        raise ImportFileError(f"{where}: {exc.message}") from None
