"""Coverage pairs from summaries a real model wrote: collected through the desk's own compaction path.

`manage.py collect_model_pairs` imports real inputs (the eval set, the tau fixtures, the public tau2 retail file)
into a rolled-back transaction with a ticket class whose summarizer is the `openai` backend, pointed at the local
SmolLM2 server (or any OpenAI-compatible one). Every compaction that replaced turns gives its pinned state (the
snapshot's, as sent to the model), the validated summary the desk stored, and the model's raw reply; each pinned
item of that state, paired with the whole summary, is one coverage pair. The pairs are written unlabelled
(`expected` absent); a person labels them by reading (`expected`, `reason`, `labelled_by`), and only then does
`evals.coverage_bench.run_model_pairs` run the check on them.

Nothing here judges coverage: the labels are the people's, the verdict the engine's (`core.coverage`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

from django.db import transaction
from django.test.utils import override_settings

import compaction.services
from compaction.models import CompactionEvent, ContextSnapshot
from compaction.summarizers import Summarizer, SummarizerReply, SummaryRequest, get_summarizer
from core.summary import SUMMARY_FIELDS
from core.vocabulary import CompactionStatus, SummarizerBackend
from desk.importer import ImportFileError, ImportTicket, import_ticket_rolled_back
from evals.runner import class_spec
from evals.sources import expand, load
from tickets.models import Ticket, TicketClass

MODEL_PAIRS = Path(__file__).resolve().parent / "fixtures" / "coverage" / "model_pairs.jsonl"
# A 135M model on shared cores: a summary takes seconds to a minute (the desk's 10 s is a hosted model's).
DEADLINE_SECONDS = 240
IMMEDIATE_TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}


class _RollBack(Exception):
    pass


@dataclass
class _Recorder:
    """Wraps the backend the compaction service asks for and keeps every raw reply it gave."""

    replies: list[tuple[SummaryRequest, str]] = field(default_factory=list)

    def get(self, backend: str) -> Summarizer:
        inner = get_summarizer(backend)
        recorder = self

        class Recording:
            def __init__(self) -> None:
                self.backend = inner.backend

            def summarize(self, request: SummaryRequest, *, timeout: float) -> SummarizerReply:
                reply = inner.summarize(request, timeout=timeout)
                recorder.replies.append((request, reply.text))
                return reply

        return Recording()

    def raw_for(self, ticket_id: str, last_turn: int | None) -> str | None:
        """The last raw reply to a request for this ticket whose window ended at `last_turn`."""
        for request, text in reversed(self.replies):
            turns = [int(t["turn"]) for t in request.turns if isinstance(t.get("turn"), int)]
            if request.ticket_id == ticket_id and turns and max(turns) == last_turn:
                return text
        return None


@contextmanager
def recording() -> Iterator[_Recorder]:
    recorder = _Recorder()
    with mock.patch.object(compaction.services, "get_summarizer", recorder.get):
        yield recorder


def _class_for(doc: ImportTicket, model: str) -> TicketClass:
    """The ticket's own class figures (evals.runner.class_spec), on a class the local model summarizes; a slug
    naming no class here gives the defaults."""
    try:
        fields = class_spec(doc)
    except ImportFileError:
        fields = {}
    return TicketClass.objects.create(
        slug=f"pairs-{uuid.uuid4().hex[:12]}",
        summarizer_backend=SummarizerBackend.OPENAI,
        summarizer_model=model,
        **fields,
    )


def pinned_items(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every pinned action, constraint, open question and decision of a state, with its kind."""
    return [(kind, dict(item)) for kind in SUMMARY_FIELDS for item in state.get(kind) or []]


def _bench_item(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    """The fields of a pinned item the check reads (the rest is provenance and noise in a fixture)."""
    keep = (
        ("id", "tool", "item", "amount_cents", "at_turn", "reversed")
        if kind == "actions_taken"
        else ("id", "text", "at_turn")
    )
    return {k: item[k] for k in keep if k in item}


def pairs_of_event(
    *,
    pinned_state: dict[str, Any],
    summary: dict[str, Any],
    raw_output: str | None,
    source: dict[str, Any],
    max_items: int | None = None,
) -> list[dict[str, Any]]:
    """One unlabelled pair per pinned item of the state the model was sent, each with the whole summary.

    With `max_items`, the items are taken round-robin over the four kinds (actions first), so a state with
    thirty constraints still gives its actions and questions."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for kind, item in pinned_items(pinned_state):
        by_kind.setdefault(kind, []).append(item)
    chosen: list[tuple[str, dict[str, Any]]] = []
    while any(by_kind.values()) and (max_items is None or len(chosen) < max_items):
        for kind in SUMMARY_FIELDS:
            if by_kind.get(kind) and (max_items is None or len(chosen) < max_items):
                chosen.append((kind, by_kind[kind].pop(0)))
    return [
        {
            "kind": kind,
            "item": _bench_item(kind, item),
            "summary": {
                **{k: [str(e) for e in summary.get(k) or []] for k in SUMMARY_FIELDS},
                "narrative": str(summary.get("narrative") or ""),
            },
            "raw_output": raw_output,
            "source": source,
        }
        for kind, item in chosen
    ]


@dataclass
class Collected:
    pairs: list[dict[str, Any]] = field(default_factory=list)
    summaries: int = 0
    failed: int = 0  # compactions whose every attempt failed (no summary to pair)
    tickets: int = 0


def _collect_ticket(
    doc: ImportTicket, *, file: str, model: str, max_items: int | None, out: Collected
) -> None:
    with recording() as recorder:
        try:
            with transaction.atomic():
                ticket_class = _class_for(doc, model)
                ticket_id = f"pairs~{doc.ticket_id}"[:64]
                import_ticket_rolled_back(
                    doc.model_copy(update={"ticket_id": ticket_id, "ticket_class": ticket_class.slug}),
                    source=file,
                )
                ticket = Ticket.objects.get(ticket_id=ticket_id)
                events = CompactionEvent.objects.filter(ticket=ticket).order_by("number")
                for event in events:
                    if event.status == CompactionStatus.FAILED and event.attempts:
                        out.failed += 1
                    if event.status not in CompactionStatus.replacing() or not event.summary:
                        continue
                    snapshot = ContextSnapshot.objects.get(event=event)
                    out.summaries += 1
                    out.pairs += pairs_of_event(
                        pinned_state=snapshot.pinned_state,
                        summary=event.summary,
                        raw_output=recorder.raw_for(ticket_id, event.last_replaced_turn),
                        source={
                            "file": file,
                            "ticket": doc.ticket_id,
                            "event": event.number,
                            "at_turn": event.at_turn,
                            "replaced_turns": [event.first_replaced_turn, event.last_replaced_turn],
                            "status": event.status,
                            "summarizer_input_tokens": event.summarizer_input_tokens,
                            "summarizer_output_tokens": event.summarizer_output_tokens,
                            "latency_ms": event.latency_ms,
                        },
                        max_items=max_items,
                    )
                raise _RollBack
        except _RollBack:
            pass
    out.tickets += 1


def collect(
    paths: list[Path],
    *,
    model: str,
    tickets_per_file: int | None = None,
    skip_tickets: int = 0,
    max_items: int | None = None,
    max_summaries: int | None = None,
    progress: Callable[[str], None] | None = None,
    on_pairs: Callable[[list[dict[str, Any]]], None] | None = None,
) -> Collected:
    """Run the openai backend over the tickets of each file (the first `tickets_per_file` of each) and gather
    the pairs of every replacing compaction (after the first `skip_tickets` of each file). OPENAI_BASE_URL / OPENAI_API_KEY name the server. `on_pairs` is
    given each ticket's pairs as soon as they are collected (the command writes them as it goes)."""
    out = Collected()
    with override_settings(
        TASKS=IMMEDIATE_TASKS,
        SUNDRY_COMPACTION_DEADLINE_SECONDS=DEADLINE_SECONDS,
        SUNDRY_SUMMARIZER_TIMEOUT_SECONDS=DEADLINE_SECONDS,
    ):
        for path in expand(paths):
            _kind, docs = load(path)
            end = None if tickets_per_file is None else skip_tickets + tickets_per_file
            for doc in docs[skip_tickets:end]:
                if max_summaries is not None and out.summaries >= max_summaries:
                    return out
                before = len(out.pairs)
                _collect_ticket(doc, file=str(path), model=model, max_items=max_items, out=out)
                if on_pairs:
                    on_pairs(out.pairs[before:])
                if progress:
                    progress(f"{path.name} {doc.ticket_id}: {len(out.pairs) - before} pairs")
    return out


def numbered(
    pairs: list[dict[str, Any]], *, collection: dict[str, Any], start: int = 1
) -> list[dict[str, Any]]:
    """Pairs with ids (`mp-001`, ...) and the collection's model, date and settings, ready to write."""
    return [
        {"id": f"mp-{n:03d}", **pair, "collection": collection} for n, pair in enumerate(pairs, start=start)
    ]


def collection_record(*, model: str, base_url: str, settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": model,
        "base_url": base_url,
        "collected_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "backend": "openai (compaction.summarizers.OpenAISummarizer, json_schema response format)",
        "settings": settings,
    }


def write_pairs(pairs: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(pair, ensure_ascii=False) + "\n")


def append_pairs(pairs: list[dict[str, Any]], path: Path) -> None:
    with path.open("a", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(pair, ensure_ascii=False) + "\n")
