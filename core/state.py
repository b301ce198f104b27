"""The pinned state: the structured record no summarizer touches.

A pydantic model validates the JSON kept in `PinnedState.data`; the agent-facing document adds the
ticket's identifiers, the version and the derived money totals. Which tools move money and which cannot be
undone comes from the ticket class's tool catalog, handed in by the caller (`StateItems.load`).

One module although over 400 lines: the item models, the operations on them and the agent-facing
document are one schema, changed together (a new field touches all three).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, computed_field

from core.errors import InvalidInput
from core.identity import (
    MONEY_EFFECTS,
    MoneyEffect,
    ToolCatalog,
    action_items,
    guard_effect,
    normalize_name,
)
from core.vocabulary import ActionStatus, ActorKind

# Kept in the stored data, left out of what the agent reads (it costs tokens and tells the model nothing).
# The owner (the user id of the agent that recorded it, who alone settles it besides a supervisor) likewise.
STORED_ONLY_ACTION_FIELDS = {"intended_at", "recorded_by_user_id"}


# How the desk knows an item: the tool result that settled it, the customer's own turn, the agent's inference,
# a supervisor's correction, a payments-ledger entry. None: not said (items kept from before it was recorded).
Provenance = Literal[
    "tool_result", "customer_turn", "agent_inference", "supervisor_correction", "ledger_entry"
]
PROVENANCES: tuple[Provenance, ...] = get_args(Provenance)


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    at_turn: int | None = Field(default=None, ge=1)
    source: Provenance | None = None


class ActionItem(_Item):
    tool: str = Field(min_length=1, max_length=100)
    item: str = Field(default="", max_length=200)
    amount_cents: int = Field(default=0, ge=0)
    reversible: bool = False
    args: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    recorded_by: ActorKind = ActorKind.AGENT
    repeat_of: str | None = None
    reason: str = ""
    reversed: bool = False
    reversed_reason: str = ""
    # Recorded without a status, an action succeeded; old stored actions read the same way.
    status: ActionStatus = ActionStatus.SUCCEEDED
    failure_reason: str = ""
    intended_at: datetime | None = None
    # The payment system's reference for the money it moved (a settle may carry it): the ledger reconciler
    # matches on it first. Left out of the stored and agent-facing JSON until an action has one.
    external_ref: str | None = Field(default=None, max_length=200, exclude_if=lambda value: value is None)
    recorded_by_user_id: int | None = None

    @property
    def holds_item(self) -> bool:
        """An intended or succeeded action that was not reversed keeps its item from a second one."""
        return self.status != ActionStatus.FAILED and not self.reversed

    @property
    def is_open_intent(self) -> bool:
        return self.status == ActionStatus.INTENDED and not self.reversed

    def describe(self) -> str:
        amount = f" of {self.amount_cents} cents" if self.amount_cents else ""
        item = f" for {self.item}" if self.item else ""
        turn = f" at turn {self.at_turn}" if self.at_turn else ""
        return f"{self.tool}{amount}{item}{turn}"


class TextItem(_Item):
    text: str = Field(min_length=1, max_length=2000)


# The agent-facing name of each money effect's total.
_TOTAL_OF: dict[MoneyEffect, str] = {
    "refund": "refunded_cents_total",
    "charge": "charged_cents_total",
    "credit": "credited_cents_total",
}
# The totals' names, in the agent-facing document's order.
MONEY_TOTALS = tuple(_TOTAL_OF.values())


def total_name(effect: MoneyEffect) -> str:
    """The agent-facing name of a money effect's total (refund -> refunded_cents_total)."""
    return _TOTAL_OF[effect]


# The item lists of the state.
ITEM_LISTS = ("actions_taken", "customer_constraints", "open_questions", "decisions")
# The lists of text items (constraints, questions, decisions): what `PinnedState.data` keeps.
TEXT_ITEM_LISTS = ITEM_LISTS[1:]


@dataclass(frozen=True)
class ItemChange:
    """What one state operation did to one item, in stored form: added (no `before`), changed (both), or
    removed (no `after`, a resolved question). The audit keeps this instead of two copies of the state."""

    category: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        return {"category": self.category, "before": self.before, "after": self.after}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ItemChange:
        return cls(category=data["category"], before=data.get("before"), after=data.get("after"))


# An action's part in its tool's figures: [succeeded cents, held cents, succeeded count, intended count] of the
# actions not reversed (held: succeeded or reserved). Stored by tool as recorded (the catalog may classify it
# anew later), so the money totals, a cap's room and an agent's belief are read without the actions themselves.
_FIGURE_WIDTH = 4


def _figure_part(action: dict[str, Any]) -> tuple[str, list[int]] | None:
    """The stored (or dumped) action's part in its tool's figures, or None when it holds nothing."""
    if action.get("reversed"):
        return None
    status = action.get("status") or ActionStatus.SUCCEEDED
    cents = int(action.get("amount_cents") or 0)
    if status == ActionStatus.SUCCEEDED:
        return action["tool"], [cents, cents, 1, 0]
    if status == ActionStatus.INTENDED:
        return action["tool"], [0, cents, 0, 1]
    return None


def stored_open_intent(action: dict[str, Any]) -> bool:
    """A stored action reserved and not yet settled (nor reversed)."""
    return action.get("status") == ActionStatus.INTENDED and not action.get("reversed")


class ActionFigures:
    """The money figures of a state's actions by tool: what the totals, the caps and an agent's belief are
    computed from (with the class's catalog), kept current by each change to an action. Pure."""

    def __init__(self, by_tool: dict[str, list[int]] | None = None) -> None:
        self.by_tool: dict[str, list[int]] = {tool: list(row) for tool, row in (by_tool or {}).items()}

    @classmethod
    def of(cls, actions: Iterable[ActionItem]) -> ActionFigures:
        figures = cls()
        for a in actions:
            figures.apply(
                None,
                {"tool": a.tool, "amount_cents": a.amount_cents, "status": a.status, "reversed": a.reversed},
            )
        return figures

    def apply(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        """One action changed from `before` to `after` (stored forms; None: not there)."""
        for side, sign in ((before, -1), (after, 1)):
            part = None if side is None else _figure_part(side)
            if part is None:
                continue
            tool, values = part
            row = self.by_tool.setdefault(tool, [0] * _FIGURE_WIDTH)
            for index, value in enumerate(values):
                row[index] += sign * value
            if not any(row):
                del self.by_tool[tool]

    def as_json(self) -> dict[str, list[int]]:
        return {tool: list(row) for tool, row in sorted(self.by_tool.items())}

    def totals(self, tools: ToolCatalog) -> dict[str, int]:
        """Cents moved by succeeded, non-reversed actions, by money effect's total name."""
        moved = dict.fromkeys(MONEY_EFFECTS, 0)
        for tool, row in self.by_tool.items():
            effect = tools.money_effect(tool)
            if effect is not None:
                moved[effect] += row[0]
        return {_TOTAL_OF[effect]: cents for effect, cents in moved.items()}

    def held_cents(self, tools: ToolCatalog, effect: str) -> int:
        """Cents of this money effect that succeeded or are reserved."""
        return sum(row[1] for tool, row in self.by_tool.items() if tools.money_effect(tool) == effect)

    def counts(
        self, tools: ToolCatalog, *, name: str | None = None, total: str | None = None
    ) -> tuple[int, int]:
        """(succeeded, intended) actions not reversed of the tools normalized to `name`, or of the money effect
        whose total is `total`."""
        succeeded = intended = 0
        for tool, row in self.by_tool.items():
            if name is not None:
                if normalize_name(tool) != name:
                    continue
            elif (effect := tools.money_effect(tool)) is None or _TOTAL_OF[effect] != total:
                continue
            succeeded += row[2]
            intended += row[3]
        return succeeded, intended


class PartialState(RuntimeError):
    """A state loaded with only some of its actions was asked for something that needs them all."""


class StateItems(BaseModel):
    """The pinned state's items: what `PinnedState.data` holds (its text lists) with the ticket's actions, which
    are stored as rows of their own (tickets.models.StateAction).

    Loaded whole (`load`), every action is here. Loaded for one action's write (`load_partial`), only the
    actions that write can touch are: those that may hold the same item, the open intents and the one it
    names; the count and the money figures (`ActionFigures`) come with them, so an id, a total, a cap and a
    belief are right without the others, and whatever needs every action refuses (`PartialState`).
    """

    model_config = ConfigDict(extra="forbid")

    actions_taken: list[ActionItem] = Field(default_factory=list)
    customer_constraints: list[TextItem] = Field(default_factory=list)
    open_questions: list[TextItem] = Field(default_factory=list)
    decisions: list[TextItem] = Field(default_factory=list)
    # Resolved questions leave the list; this counter keeps question ids unique (Q1, Q2, ...).
    questions_opened: int = Field(default=0, ge=0)
    # The class's tool catalog: not stored, handed in by `load` (the defaults when nobody did).
    _tools: ToolCatalog = PrivateAttr(default_factory=ToolCatalog.default)
    # What the operations applied since `load` did, item by item (read by the service that audits them).
    _changes: list[ItemChange] = PrivateAttr(default_factory=list)
    # The actions' money figures and count: from the list when loaded whole (on first use), else as stored.
    _figures: ActionFigures | None = PrivateAttr(default=None)
    _action_count: int | None = PrivateAttr(default=None)
    _partial: bool = PrivateAttr(default=False)

    @classmethod
    def load(
        cls, data: dict[str, Any], *, tools: ToolCatalog, actions: list[dict[str, Any]] | None = None
    ) -> StateItems:
        """The stored items, read with the class's tool catalog: the text lists of `data` and every action
        (`actions`, the stored rows' in order; else those `data` holds, as documents stored before rows did)."""
        if actions is not None:
            data = {**data, "actions_taken": actions}
        items = cls.model_validate(data)
        items._tools = tools
        return items

    @classmethod
    def load_partial(
        cls,
        stored: str | dict[str, Any],
        *,
        tools: ToolCatalog,
        actions: list[ActionItem],
        action_count: int,
        figures: dict[str, list[int]],
    ) -> StateItems:
        """The text lists of the stored data (as JSON text: parsed and validated in one pass by pydantic) with
        only these `actions` of the `action_count` there are, and the stored money figures of all of them."""
        items = cls.model_validate_json(stored) if isinstance(stored, str) else cls.model_validate(stored)
        if items.actions_taken:
            raise ValueError("a partly loaded state takes its actions from their rows")
        items.actions_taken = actions
        items._tools = tools
        items._figures = ActionFigures(figures)
        items._action_count = action_count
        items._partial = True
        return items

    @property
    def partial(self) -> bool:
        """Only some of the actions are loaded (`load_partial`)."""
        return self._partial

    @property
    def figures(self) -> ActionFigures:
        """The actions' money figures by tool, kept current by the operations."""
        if self._figures is None:
            self._figures = ActionFigures.of(self.actions_taken)
        return self._figures

    @property
    def action_count(self) -> int:
        return len(self.actions_taken) if self._action_count is None else self._action_count

    def whole(self) -> StateItems:
        """Itself, when every action is loaded; PartialState otherwise."""
        if self._partial:
            raise PartialState("this state was loaded with only some of its actions")
        return self

    @property
    def tools(self) -> ToolCatalog:
        return self._tools

    @property
    def changes(self) -> list[ItemChange]:
        return list(self._changes)

    def _added(self, category: str, item: _Item) -> None:
        after = item.model_dump(mode="json")
        self._changes.append(ItemChange(category, None, after))
        if category == "actions_taken":
            self.figures.apply(None, after)

    def _snapshot(self, item: _Item) -> dict[str, Any]:
        """The item as it is before an operation changes it (then `_changed` records both)."""
        if isinstance(item, ActionItem):
            _ = self.figures  # taken from the actions as they are before the change, when loaded whole
        return item.model_dump(mode="json")

    def _changed(self, category: str, before: dict[str, Any], item: _Item) -> None:
        after = item.model_dump(mode="json")
        self._changes.append(ItemChange(category, before, after))
        if category == "actions_taken":
            self.figures.apply(before, after)

    def _removed(self, category: str, item: _Item) -> None:
        self._changes.append(ItemChange(category, item.model_dump(mode="json"), None))

    def totals(self) -> dict[str, int]:
        """The derived money totals, by their names in the agent-facing state, in one pass over the actions:
        cents moved by succeeded, non-reversed actions whose tool has that money effect in the catalog."""
        return self.figures.totals(self._tools)

    def held_cents(self, effect: str) -> int:
        """Cents of this money effect that succeeded or are reserved (intents count against a cap)."""
        return self.figures.held_cents(self._tools, effect)

    def money_total(self, effect: MoneyEffect) -> int:
        return self.totals()[_TOTAL_OF[effect]]

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
        count = self.action_count
        _ = self.figures  # of the actions before this one
        action.id = f"A{count + 1}"
        self.actions_taken.append(action)
        self._action_count = count + 1
        self._added("actions_taken", action)
        return action

    def reverse_action(self, *, action_id: str, reason: str) -> ActionItem:
        action = self.find_action(action_id)
        if action is None:
            raise InvalidInput(f"no action {action_id!r} on this ticket", field="target_id")
        if action.reversed:
            raise InvalidInput(f"action {action_id} is already marked reversed", field="target_id")
        before = self._snapshot(action)
        action.reversed = True
        action.reversed_reason = reason
        self._changed("actions_taken", before, action)
        return action

    def state_constraint(
        self, *, text: str, at_turn: int | None, source: Provenance | None = None
    ) -> TextItem:
        constraint = TextItem(
            id=self.next_id("C", self.customer_constraints), text=text, at_turn=at_turn, source=source
        )
        self.customer_constraints.append(constraint)
        self._added("customer_constraints", constraint)
        return constraint

    def edit_constraint(self, *, constraint_id: str, text: str, source: Provenance | None = None) -> TextItem:
        constraint = next((c for c in self.customer_constraints if c.id == constraint_id), None)
        if constraint is None:
            raise InvalidInput(f"no constraint {constraint_id!r} on this ticket", field="target_id")
        before = self._snapshot(constraint)
        constraint.text = text
        constraint.source = source or constraint.source
        self._changed("customer_constraints", before, constraint)
        return constraint

    def open_question(self, *, text: str, at_turn: int | None, source: Provenance | None = None) -> TextItem:
        self.questions_opened += 1
        question = TextItem(id=f"Q{self.questions_opened}", text=text, at_turn=at_turn, source=source)
        self.open_questions.append(question)
        self._added("open_questions", question)
        return question

    def resolve_question(self, *, question: str) -> TextItem:
        """Close an open question, named by its id (`Q2`) or its exact text (case aside)."""
        for index, q in enumerate(self.open_questions):
            if q.id == question or q.text.casefold() == question.casefold():
                resolved = self.open_questions.pop(index)
                self._removed("open_questions", resolved)
                return resolved
        open_ones = ", ".join(f"{q.id} {q.text!r}" for q in self.open_questions) or "none"
        raise InvalidInput(f"no open question {question!r}; open questions: {open_ones}", field="text")

    def make_decision(self, *, text: str, at_turn: int | None, source: Provenance | None = None) -> TextItem:
        decision = TextItem(id=self.next_id("D", self.decisions), text=text, at_turn=at_turn, source=source)
        self.decisions.append(decision)
        self._added("decisions", decision)
        return decision

    def find_action(self, action_id: str) -> ActionItem | None:
        return next((a for a in self.actions_taken if a.id == action_id), None)

    def earlier_irreversible(
        self, *, tool: str, item: str, args: dict[str, Any] | None = None
    ) -> ActionItem | None:
        """The irreversible action that still holds what this one would do, however either was spelled.

        A money tool is compared by what it does (a refund and a store credit both pay the buyer back; a
        charge takes from them) on the same item, whichever tool it is: its `item`, else the items named in
        its `args`; no item at all means the whole order, which every item of it collides with. Any other
        irreversible tool is compared by its name and its item.
        """
        tools = self._tools  # read once: a private attribute goes through pydantic's __getattr__
        effect = tools.money_effect(tool)
        items = action_items(item, args)
        name = normalize_name(tool)
        for action in self.actions_taken:
            if not action.holds_item or not (not action.reversible or tools.is_irreversible(action.tool)):
                continue
            earlier_effect = tools.money_effect(action.tool)
            earlier_items = action_items(action.item, action.args)
            if effect is not None:
                if earlier_effect is None or guard_effect(earlier_effect) != guard_effect(effect):
                    continue
                if not items or not earlier_items or items & earlier_items:
                    return action
            elif (
                earlier_effect is None
                and normalize_name(action.tool) == name
                and (items == earlier_items or items & earlier_items)
            ):
                return action
        return None

    def settle_action(
        self, *, action_id: str, status: ActionStatus, reason: str = "", external_ref: str | None = None
    ) -> ActionItem:
        """Settle an intent: succeeded, or failed (which frees its item). Callers check it is still intended.

        A supervisor also marks a succeeded action failed this way, when the payment system never saw it."""
        action = self.find_action(action_id)
        if action is None:
            raise InvalidInput(f"no action {action_id!r} on this ticket", field="action_id")
        before = self._snapshot(action)
        action.status = status
        action.source = "tool_result"  # the tool's answer settled it, whichever way
        if status == ActionStatus.FAILED:
            action.failure_reason = reason
        if external_ref:
            action.external_ref = external_ref
        self._changed("actions_taken", before, action)
        return action


_ITEM_MODELS: dict[str, type[ActionItem] | type[TextItem]] = {
    name: ActionItem if name == "actions_taken" else TextItem for name in ITEM_LISTS
}


def validate_changes(changes: Iterable[ItemChange]) -> None:
    """Validate the items these changes leave (the added and the changed, in stored form) against their
    models: an operation edits its item's fields in place (a settle's status and external_ref), which pydantic
    does not check on assignment, and the stored document must load again. InvalidInput (nothing is written) when one is
    not, naming the field."""
    for change in changes:
        if change.after is None:
            continue
        try:
            _ITEM_MODELS[change.category].model_validate(change.after)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or change.category
            raise InvalidInput(f"{where}: {error['msg']}", field=where) from None


def agent_state(
    *,
    ticket: str,
    order: str,
    seller_type: str,
    version: int,
    items: StateItems,
    actions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The agent-facing pinned state: the seed's shape, plus decisions and the version. Of a state loaded whole,
    or (`actions`: every action, agent-facing, as served) of one loaded with some actions: PartialState else."""
    whole = items if actions is not None else items.whole()
    dumped = whole.model_dump(mode="json", exclude={"actions_taken": {"__all__": STORED_ONLY_ACTION_FIELDS}})
    for name in ITEM_LISTS:
        dumped[name] = [_without_unsaid_source(item) for item in dumped[name]]
    if actions is not None:
        dumped["actions_taken"] = actions
    return state_document(
        ticket=ticket,
        order=order,
        seller_type=seller_type,
        version=version,
        lists={name: dumped[name] for name in ITEM_LISTS},
        totals={name: dumped[name] for name in MONEY_TOTALS},
    )


def state_document(
    *,
    ticket: str,
    order: str,
    seller_type: str,
    version: int,
    lists: dict[str, list[dict[str, Any]]],
    totals: dict[str, int],
) -> dict[str, Any]:
    """The agent-facing document, in its one key order (which is also the order its tokens are counted in)."""
    return {
        "ticket": ticket,
        "order": order,
        "seller_type": seller_type,
        "version": version,
        **{name: lists.get(name, []) for name in ITEM_LISTS},
        **{name: totals.get(name, 0) for name in MONEY_TOTALS},
    }


def _without_unsaid_source(item: dict[str, Any]) -> dict[str, Any]:
    """An item without `source` when none was said: states kept from before provenance read as they did."""
    if "source" in item and item["source"] is None:
        return {k: v for k, v in item.items() if k != "source"}
    return item


def agent_item(category: str, item: dict[str, Any]) -> dict[str, Any]:
    """A stored item as the agent-facing state shows it (an action without its stored-only fields, any item
    without an unsaid source)."""
    item = _without_unsaid_source(item)
    if category != "actions_taken":
        return item
    return {k: v for k, v in item.items() if k not in STORED_ONLY_ACTION_FIELDS}


def replay_changes(changes: Iterable[ItemChange]) -> dict[str, Any]:
    """The stored data rebuilt from item changes, oldest first: how the audit gives the state as of any
    version without keeping copies of it. Pure."""
    lists: dict[str, list[dict[str, Any]]] = {name: [] for name in ITEM_LISTS}
    questions_opened = 0
    for change in changes:
        items = lists[change.category]
        if change.before is None and change.after is not None:
            items.append(change.after)
            if change.category == "open_questions":
                questions_opened += 1
            continue
        item_id = (change.before or {}).get("id")
        index = next((i for i, item in enumerate(items) if item.get("id") == item_id), None)
        if index is None:
            continue  # an item this replay never saw added (a hand-edited audit): nothing to change
        if change.after is None:
            items.pop(index)
        else:
            items[index] = change.after
    return {**lists, "questions_opened": questions_opened}


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


# What `PinnedState.data` keeps: the text lists and the question counter (the actions are rows of their own).
STORED_DATA_FIELDS = ("customer_constraints", "open_questions", "decisions", "questions_opened")


def items_to_data(items: StateItems) -> dict[str, Any]:
    """What `PinnedState.data` stores: the text items without anything derived, and without the actions."""
    return items.model_dump(mode="json", include=set(STORED_DATA_FIELDS))
