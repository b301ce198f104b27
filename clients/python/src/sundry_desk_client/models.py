"""The desk's answers as pydantic models (SPEC section 6). Unknown fields are kept (`extra="allow"`), so a
newer desk that adds a field does not break an older client."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TurnRole = Literal["customer", "agent", "tool_call", "tool_result"]
StateOp = Literal["constraint_stated", "question_opened", "question_resolved", "decision_made"]
TicketStatus = Literal["open", "waiting", "resolved", "escalated"]


class DeskModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class Tokens(DeskModel):
    system: int = 0
    state: int = 0
    summary: int = 0
    turns: int = 0
    framing: int = 0
    total: int = 0


class Ticket(DeskModel):
    ticket_id: str
    order_id: str
    seller_type: str
    ticket_class: str
    status: str
    turn_count: int
    state_version: int
    tokens: Tokens
    token_budget: int
    threshold_tokens: int
    first_active_turn: int = 1
    compaction_totals: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None


class CompactionOutcome(DeskModel):
    """What the compaction policy did with a turn: `status` is one of not_due, deferred, queued, applied,
    forced, failed, over_budget, superseded; the event's figures appear when it recorded an event."""

    status: str
    reason: str | None = None
    pending_since: datetime | None = None
    upto_turn: int | None = None
    number: int | None = None
    at_turn: int | None = None
    replaced_turns: list[int] | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    coverage_missing: list[dict[str, Any]] = Field(default_factory=list)


class TurnAnswer(DeskModel):
    turn: int
    tokens: int
    context_tokens: int
    threshold_tokens: int
    token_budget: int
    compaction: CompactionOutcome
    replayed: bool = False
    """True when the desk answered a retried turn from its record (`Idempotent-Replayed: true`)."""


class Action(DeskModel):
    id: str
    tool: str
    item: str = ""
    amount_cents: int = 0
    at_turn: int | None = None
    reversible: bool = False
    args: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    recorded_by: str = ""
    repeat_of: str | None = None
    reason: str = ""
    reversed: bool = False
    reversed_reason: str = ""
    status: str = "succeeded"
    """succeeded, or for an intent: intended, then succeeded or failed."""


class ActionRecorded(DeskModel):
    action: Action
    state_version: int | None = None
    refunded_cents_total: int | None = None
    replayed: bool = False


class TextItem(DeskModel):
    id: str
    at_turn: int | None = None
    text: str


class PinnedState(DeskModel):
    ticket: str
    order: str
    seller_type: str
    version: int
    actions_taken: list[Action] = Field(default_factory=list)
    customer_constraints: list[TextItem] = Field(default_factory=list)
    open_questions: list[TextItem] = Field(default_factory=list)
    decisions: list[TextItem] = Field(default_factory=list)
    refunded_cents_total: int = 0

    def agent_json(self) -> dict[str, Any]:
        """The state as the desk gave it, for a prompt."""
        return self.model_dump(mode="json")


class Summary(DeskModel):
    decisions: list[str] = Field(default_factory=list)
    actions_taken: list[str] = Field(default_factory=list)
    customer_constraints: list[str] = Field(default_factory=list)
    open_questions: list[str] = Field(default_factory=list)
    narrative: str = ""


class ContextTurn(DeskModel):
    number: int
    role: str
    content: str = ""
    tool: str = ""
    args: Any = None
    tool_call_id: str = ""
    boundary: str = ""
    tokens: int = 0


class Context(DeskModel):
    """The assembled request: system prompt, pinned state, the active summary and the turns since."""

    system_prompt: str = ""
    pinned_state: PinnedState
    summary: Summary | None = None
    summary_covers_turns: list[int] | None = None
    turns: list[ContextTurn] = Field(default_factory=list)
    tokens: Tokens
    token_budget: int
    threshold_tokens: int


class Coverage(DeskModel):
    covered: list[dict[str, Any]] = Field(default_factory=list)
    missing: list[dict[str, Any]] = Field(default_factory=list)


class Compaction(DeskModel):
    number: int
    at_turn: int
    status: str
    replaced_turns: list[int] | None = None
    tokens_before: int = 0
    tokens_after: int | None = None
    tokens_saved: int = 0
    threshold_tokens: int = 0
    attempts: int = 0
    validation_errors: list[str] = Field(default_factory=list)
    summarizer_backend: str = ""
    summarizer_model: str = ""
    latency_ms: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    cost_usd: str | float | None = None
    coverage: Coverage = Field(default_factory=Coverage)
    created_at: datetime | None = None


class HistoryEntry(DeskModel):
    """One change to the ticket (a turn, a state change, an action intended/settled/reversed, a refused
    attempt, a status change, a correction, a compaction). The desk decides the fields; the ones every
    entry is expected to have are typed here, everything else is kept as it came."""

    kind: str | None = None
    at: datetime | None = None
    by: Any = None

    def text(self) -> str:
        """The whole entry as one lower-cased string, for searching."""
        return self.model_dump_json().lower()


class HistoryPage(DeskModel):
    results: list[HistoryEntry] = Field(default_factory=list)
    next: str | None = None
    previous: str | None = None
    count: int | None = None
