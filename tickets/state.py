"""The pinned state: the structured record no summarizer touches.

A pydantic model validates the JSON kept in `PinnedState.data`; the agent-facing document adds the
ticket's identifiers, the version and the derived `refunded_cents_total`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from tickets.errors import InvalidInput

ActorKind = Literal["agent", "supervisor", "system"]


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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def refunded_cents_total(self) -> int:
        """Money returned to the buyer so far: derived from the actions, never typed in."""
        return sum(a.amount_cents for a in self.actions_taken if not a.reversed)

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
        """The standing irreversible action of this tool on this item, if any."""
        for action in self.actions_taken:
            if action.tool == tool and action.item == item and not action.reversible and not action.reversed:
                return action
        return None


def agent_state(
    *, ticket: str, order: str, seller_type: str, version: int, items: StateItems
) -> dict[str, Any]:
    """The agent-facing pinned state: the seed's shape, plus decisions and the version."""
    dumped = items.model_dump(mode="json")
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
