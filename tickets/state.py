"""The pinned state: the structured record no summarizer touches.

A pydantic model validates the JSON kept in `PinnedState.data`; the agent-facing document adds the
ticket's identifiers, the version and the derived money totals. Which tools move money and which cannot be
undone comes from the ticket class's tool catalog, handed in by the caller (`StateItems.load`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, computed_field

from tickets.errors import InvalidInput
from tickets.identity import MoneyEffect, ToolCatalog, action_identity

ActorKind = Literal["agent", "supervisor", "system"]
# intended: reserved before the tool ran; succeeded: the tool did it; failed: it did not (the item is free).
ActionStatus = Literal["intended", "succeeded", "failed"]
INTENDED: ActionStatus = "intended"
SUCCEEDED: ActionStatus = "succeeded"
FAILED: ActionStatus = "failed"
# Kept in the stored data, left out of what the agent reads (it costs tokens and tells the model nothing).
STORED_ONLY_ACTION_FIELDS = {"intended_at"}


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    at_turn: int | None = Field(default=None, ge=1)


class ActionItem(_Item):
    tool: str = Field(min_length=1, max_length=100)
    item: str = Field(default="", max_length=200)
    amount_cents: int = Field(default=0, ge=0)
    reversible: bool = False
    args: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    recorded_by: ActorKind = "agent"
    repeat_of: str | None = None
    reason: str = ""
    reversed: bool = False
    reversed_reason: str = ""
    # Recorded without a status, an action succeeded; old stored actions read the same way.
    status: ActionStatus = SUCCEEDED
    failure_reason: str = ""
    intended_at: datetime | None = None

    @property
    def holds_item(self) -> bool:
        """An intended or succeeded action that was not reversed keeps its item from a second one."""
        return self.status != FAILED and not self.reversed

    @property
    def is_open_intent(self) -> bool:
        return self.status == INTENDED and not self.reversed

    def describe(self) -> str:
        amount = f" of {self.amount_cents} cents" if self.amount_cents else ""
        item = f" for {self.item}" if self.item else ""
        turn = f" at turn {self.at_turn}" if self.at_turn else ""
        return f"{self.tool}{amount}{item}{turn}"


class TextItem(_Item):
    text: str = Field(min_length=1, max_length=2000)


class StateItems(BaseModel):
    """What `PinnedState.data` holds."""

    model_config = ConfigDict(extra="forbid")

    actions_taken: list[ActionItem] = Field(default_factory=list)
    customer_constraints: list[TextItem] = Field(default_factory=list)
    open_questions: list[TextItem] = Field(default_factory=list)
    decisions: list[TextItem] = Field(default_factory=list)
    # Resolved questions leave the list; this counter keeps question ids unique (Q1, Q2, ...).
    questions_opened: int = Field(default=0, ge=0)
    # The class's tool catalog: not stored, handed in by `load` (the defaults when nobody did).
    _tools: ToolCatalog = PrivateAttr(default_factory=ToolCatalog.default)

    @classmethod
    def load(cls, data: dict[str, Any], *, tools: ToolCatalog) -> StateItems:
        """The stored items, read with the class's tool catalog."""
        items = cls.model_validate(data)
        items._tools = tools
        return items

    @property
    def tools(self) -> ToolCatalog:
        return self._tools

    def money_total(self, effect: MoneyEffect) -> int:
        """Cents moved by succeeded, non-reversed actions whose tool has this money effect in the catalog."""
        return sum(
            a.amount_cents
            for a in self.actions_taken
            if a.status == SUCCEEDED and not a.reversed and self._tools.money_effect(a.tool) == effect
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def refunded_cents_total(self) -> int:
        """Money returned to the buyer so far: derived from the refund actions, never typed in."""
        return self.money_total("refund")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def charged_cents_total(self) -> int:
        return self.money_total("charge")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def credited_cents_total(self) -> int:
        return self.money_total("credit")

    def is_irreversible(self, action: ActionItem) -> bool:
        """Irreversible when the agent said so or the class lists the tool; `reversible: true` cannot undo a listing."""
        return not action.reversible or self._tools.is_irreversible(action.tool)

    def open_intent_since(self) -> datetime | None:
        """When the oldest intent still waiting to be settled was made."""
        times = [a.intended_at for a in self.actions_taken if a.is_open_intent and a.intended_at is not None]
        return min(times) if times else None

    def next_id(self, prefix: str, items: list[ActionItem] | list[TextItem]) -> str:
        return f"{prefix}{len(items) + 1}"

    # --- the operations: each change to the state is one method, used by agents, supervisors and import ---

    def add_action(self, action: ActionItem) -> ActionItem:
        """Append an action; its id is assigned here (A1, A2, ...). Actions are never removed."""
        action.id = self.next_id("A", self.actions_taken)
        self.actions_taken.append(action)
        return action

    def reverse_action(self, *, action_id: str, reason: str) -> ActionItem:
        action = self.find_action(action_id)
        if action is None:
            raise InvalidInput(f"no action {action_id!r} on this ticket", field="target_id")
        if action.reversed:
            raise InvalidInput(f"action {action_id} is already marked reversed", field="target_id")
        action.reversed = True
        action.reversed_reason = reason
        return action

    def state_constraint(self, *, text: str, at_turn: int | None) -> TextItem:
        constraint = TextItem(id=self.next_id("C", self.customer_constraints), text=text, at_turn=at_turn)
        self.customer_constraints.append(constraint)
        return constraint

    def edit_constraint(self, *, constraint_id: str, text: str) -> TextItem:
        constraint = next((c for c in self.customer_constraints if c.id == constraint_id), None)
        if constraint is None:
            raise InvalidInput(f"no constraint {constraint_id!r} on this ticket", field="target_id")
        constraint.text = text
        return constraint

    def open_question(self, *, text: str, at_turn: int | None) -> TextItem:
        self.questions_opened += 1
        question = TextItem(id=f"Q{self.questions_opened}", text=text, at_turn=at_turn)
        self.open_questions.append(question)
        return question

    def resolve_question(self, *, question: str) -> TextItem:
        """Close an open question, named by its id (`Q2`) or its exact text (case aside)."""
        for index, q in enumerate(self.open_questions):
            if q.id == question or q.text.casefold() == question.casefold():
                return self.open_questions.pop(index)
        open_ones = ", ".join(f"{q.id} {q.text!r}" for q in self.open_questions) or "none"
        raise InvalidInput(f"no open question {question!r}; open questions: {open_ones}", field="text")

    def make_decision(self, *, text: str, at_turn: int | None) -> TextItem:
        decision = TextItem(id=self.next_id("D", self.decisions), text=text, at_turn=at_turn)
        self.decisions.append(decision)
        return decision

    def find_action(self, action_id: str) -> ActionItem | None:
        return next((a for a in self.actions_taken if a.id == action_id), None)

    def earlier_irreversible(self, *, tool: str, item: str) -> ActionItem | None:
        """The irreversible action that holds this (tool, item) identity, however either was spelled."""
        identity = action_identity(tool, item)
        for action in self.actions_taken:
            if (
                action.holds_item
                and self.is_irreversible(action)
                and action_identity(action.tool, action.item) == identity
            ):
                return action
        return None

    def settle_action(self, *, action_id: str, status: ActionStatus, reason: str = "") -> ActionItem:
        """Settle an intent: succeeded, or failed (which frees its item). Callers check it is still intended."""
        action = self.find_action(action_id)
        if action is None:
            raise InvalidInput(f"no action {action_id!r} on this ticket", field="action_id")
        action.status = status
        if status == FAILED:
            action.failure_reason = reason
        return action


def agent_state(
    *, ticket: str, order: str, seller_type: str, version: int, items: StateItems
) -> dict[str, Any]:
    """The agent-facing pinned state: the seed's shape, plus decisions and the version."""
    dumped = items.model_dump(mode="json", exclude={"actions_taken": {"__all__": STORED_ONLY_ACTION_FIELDS}})
    return {
        "ticket": ticket,
        "order": order,
        "seller_type": seller_type,
        "version": version,
        "actions_taken": dumped["actions_taken"],
        "customer_constraints": dumped["customer_constraints"],
        "open_questions": dumped["open_questions"],
        "decisions": dumped["decisions"],
        "refunded_cents_total": dumped["refunded_cents_total"],
        "charged_cents_total": dumped["charged_cents_total"],
        "credited_cents_total": dumped["credited_cents_total"],
    }


# Bookkeeping the desk keeps on each action but the model never needs: left out of what it reads (and counts).
MODEL_OMITTED_ACTION_FIELDS = frozenset({"idempotency_key", "recorded_by"})


def model_state(state: dict[str, Any]) -> dict[str, Any]:
    """The agent-facing state as the model reads it in the context: the actions without their bookkeeping."""
    actions = state.get("actions_taken")
    if not actions:
        return state
    return dict(
        state,
        actions_taken=[{k: v for k, v in a.items() if k not in MODEL_OMITTED_ACTION_FIELDS} for a in actions],
    )


def items_to_data(items: StateItems) -> dict[str, Any]:
    """What is stored: the items without anything derived."""
    return items.model_dump(
        mode="json",
        include={"actions_taken", "customer_constraints", "open_questions", "decisions", "questions_opened"},
    )
