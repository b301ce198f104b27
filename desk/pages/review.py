"""Reads for the compaction review page: both sides of one compaction, its coverage, its reviews, and
the next compaction that still waits for a supervisor's look."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Case, Value, When
from django.http import Http404

from compaction.models import CompactionEvent, CompactionReview, ContextSnapshot
from core.passages import Passage, TurnPassages, dropped_passages
from core.vocabulary import CompactionStatus
from desk.pages.forms import PinForm, pin_form
from desk.pages.labels import CATEGORIES, PinnedMark, item_label, pinned_marks_by_turn
from tickets.models import Ticket

# What each status means for the supervisor reading the event.
STATUS_EXPLANATIONS: dict[str, str] = {
    CompactionStatus.APPLIED: (
        "The request crossed the compaction threshold at a resolution boundary, and the summary below "
        "replaced the turns shown as replaced."
    ),
    CompactionStatus.FORCED: (
        "Forced by the hard ceiling: the request exceeded the budget itself before any resolution boundary "
        "came, so the desk compacted everything that was complete and kept the unfinished tool exchange "
        "verbatim. Check that the cut did not split the step the agent was in the middle of."
    ),
    CompactionStatus.OVER_BUDGET: (
        "Over budget with no safe cut: the request exceeded the budget, and every turn since the last "
        "compaction belonged to an unfinished tool exchange, so nothing could be replaced without cutting "
        "a tool call from its result. The agent was told so in its turn answer; nothing was replaced."
    ),
    CompactionStatus.FAILED: (
        "Failed: no valid summary came back (see the attempts and errors), or it would not have made the "
        "request smaller. Nothing was replaced and nothing was lost."
    ),
    CompactionStatus.DEFERRED: (
        "Deferred: the request was over the threshold, but the turn was not at a resolution boundary (a "
        "tool result was still waiting to be used), so nothing was replaced. Compaction fires at the next "
        "boundary."
    ),
    CompactionStatus.SUPERSEDED: (
        "Superseded: another compaction replaced the same turns while this one's summarizer was running, "
        "so its summary was kept for the record and not applied."
    ),
    CompactionStatus.PENDING: "Pending: claimed and waiting for the summarizer; review it once it has finished.",
}


@dataclass
class ReviewMessage:
    role: str
    content: str
    turn: int | None
    tool: str
    marks: list[PinnedMark]
    replaced: bool


@dataclass
class SummaryEntry:
    text: str
    covers: list[str]


@dataclass
class CoverageItem:
    id: str
    label: str
    at_turn: int | None
    covered: bool


@dataclass
class ReviewCategory:
    key: str
    label: str
    entries: list[SummaryEntry]
    items: list[CoverageItem]

    @property
    def missing(self) -> list[CoverageItem]:
        return [i for i in self.items if not i.covered]


@dataclass(frozen=True)
class DroppedPin:
    """One dropped passage and the correction that would pin it."""

    passage: Passage
    form: PinForm

    @property
    def anchor(self) -> str:
        return f"dropped-{self.passage.turn}-{self.passage.index}"


@dataclass(frozen=True)
class DroppedTurn:
    """A replaced turn with something dropped: its text in runs (each dropped passage marked) and pins."""

    turn: TurnPassages
    pins: list[DroppedPin]

    def runs(self) -> list[tuple[str, str | None]]:
        """(text, the anchor of its dropped passage or None), in the order of the turn's text."""
        return [(text, f"dropped-{p.turn}-{p.index}" if p else None) for text, p in self.turn.pieces()]


def dropped_turns(
    messages: list[ReviewMessage], summary: dict[str, Any], states: list[dict[str, Any]], version: int
) -> tuple[list[DroppedTurn], int]:
    """The replaced turns with a passage that survives neither in the summary nor in the pinned state (at
    the compaction or now: a passage pinned since is no longer dropped), and how many replaced turns of
    conversation keep everything. Pure reading of the snapshot: no query."""
    turns = [{"turn": m.turn, "role": m.role, "content": m.content} for m in messages if m.replaced]
    read = dropped_passages(turns, summary, states)
    out = []
    for tp in read:
        pins = [
            DroppedPin(
                passage=p,
                form=pin_form(
                    key=f"{p.turn}_{p.index}",
                    kind=p.kind or "decision_made",
                    text=p.text,
                    turn=p.turn,
                    version=version,
                    tool=p.tool,
                    amount_cents=p.amount_cents,
                ),
            )
            for p in tp.dropped
        ]
        if pins:
            out.append(DroppedTurn(turn=tp, pins=pins))
    return out, len(read) - len(out)


@dataclass(frozen=True)
class ReviewPage:
    event: CompactionEvent
    snapshot: ContextSnapshot | None
    messages: list[ReviewMessage]
    categories: list[ReviewCategory]
    narrative: str
    siblings: list[CompactionEvent]
    reviews: list[CompactionReview]
    next_unreviewed: CompactionEvent | None
    dropped: list[DroppedTurn]
    kept_whole: int  # replaced turns of conversation with nothing dropped

    @property
    def dropped_count(self) -> int:
        return sum(len(t.pins) for t in self.dropped)

    @property
    def missing_count(self) -> int:
        return sum(len(c.missing) for c in self.categories)

    @property
    def explanation(self) -> str:
        return STATUS_EXPLANATIONS.get(self.event.status, "")

    @property
    def latest_review(self) -> CompactionReview | None:
        return self.reviews[-1] if self.reviews else None

    @property
    def worth_review(self) -> bool:
        return self.event.coverage_missing_count > 0 or self.event.status in (
            CompactionStatus.FORCED,
            CompactionStatus.OVER_BUDGET,
            CompactionStatus.FAILED,
        )


def _covers_by_entry(coverage: dict[str, Any]) -> dict[tuple[str, int], list[str]]:
    """(summary field, entry index) -> the ids the stored report says that entry covered.

    Read from the report stored with the event, never re-run for display: the page and the flag agree.
    A report stored before it named its covering entries names none.
    """
    covers: dict[tuple[str, int], list[str]] = {}
    for item in coverage.get("covered", []):
        by = item.get("by")
        if by:
            covers.setdefault((by["field"], by["index"]), []).append(str(item.get("id", "")))
    return covers


def next_unreviewed(after: CompactionEvent | None = None) -> CompactionEvent | None:
    """The next compaction worth a look that nobody has reviewed: the oldest one after `after`, else the
    oldest before it (one query)."""
    waiting = (
        CompactionEvent.objects.worth_review()
        .unreviewed()
        .select_related("ticket")
        .only("number", "status", "ticket__ticket_id")
    )
    if after is None:
        return waiting.order_by("pk").first()
    return (
        waiting.exclude(pk=after.pk)
        .annotate(wrapped=Case(When(pk__lt=after.pk, then=Value(1)), default=Value(0)))
        .order_by("wrapped", "pk")
        .first()
    )


def get_event(ticket: Ticket, number: int) -> CompactionEvent:
    try:
        return CompactionEvent.objects.select_related("snapshot").get(ticket=ticket, number=number)
    except CompactionEvent.DoesNotExist:
        raise Http404(f"{ticket.ticket_id} has no compaction {number}") from None


def review_page(ticket: Ticket, number: int) -> ReviewPage:
    """Both sides of one compaction, with each pinned item tied to its turn (left) and its summary
    field (right). Coverage is the report stored on the event when it was written."""
    event = get_event(ticket, number)
    snapshot: ContextSnapshot | None = getattr(event, "snapshot", None)
    siblings = list(
        CompactionEvent.objects.filter(ticket=ticket).only("number", "status", "at_turn").order_by("number")
    )
    state_json: dict[str, Any] = snapshot.pinned_state if snapshot else {}
    summary: dict[str, Any] = (snapshot.summary if snapshot else None) or event.summary or {}
    marks = pinned_marks_by_turn(state_json)
    first, last = event.first_replaced_turn, event.last_replaced_turn
    messages = [
        ReviewMessage(
            role=m.get("role", ""),
            content=m.get("content", ""),
            turn=m.get("turn"),
            tool=m.get("tool", ""),
            marks=marks.get(m["turn"], []) if m.get("turn") else [],
            replaced=bool(first and last and m.get("turn") and first <= m["turn"] <= last),
        )
        for m in (snapshot.messages if snapshot else [])
    ]
    coverage = event.coverage or {}
    covered_ids = {(c["category"], c["id"]) for c in coverage.get("covered", [])}
    covers = _covers_by_entry(coverage)
    categories = []
    for key, label in CATEGORIES:
        items = state_json.get(key, [])
        entries = [
            SummaryEntry(text=e, covers=covers.get((key, index), []))
            for index, e in enumerate(summary.get(key, []))
        ]
        coverage_items = [
            CoverageItem(
                id=str(item.get("id", "")),
                label=item_label(key, item),
                at_turn=item.get("at_turn"),
                covered=bool(summary) and (key, str(item.get("id", ""))) in covered_ids,
            )
            for item in items
        ]
        categories.append(ReviewCategory(key=key, label=label, entries=entries, items=coverage_items))
    reviews = list(
        CompactionReview.objects.filter(event=event).select_related("by").order_by("created_at", "pk")
    )
    # The state now (read with the ticket) as well as the one the summarizer saw: a pin counts at once.
    now = ticket.pinned_state.agent_json()
    dropped, kept_whole = (
        dropped_turns(messages, summary, [state_json, now], int(now["version"])) if summary else ([], 0)
    )
    return ReviewPage(
        event=event,
        snapshot=snapshot,
        messages=messages,
        categories=categories,
        narrative=str(summary.get("narrative", "")),
        siblings=siblings,
        reviews=reviews,
        next_unreviewed=next_unreviewed(event),
        dropped=dropped,
        kept_whole=kept_whole,
    )
