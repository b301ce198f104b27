"""The desk's vocabulary, spelled once: every role, operation, status and kind the apps store or exchange.

Models take their `choices` from here (`choices(TurnRole)`), serializers, forms, the importer and the
compaction policy their allowed values; the subsets (what an agent may send, what a supervisor may correct)
are named here beside the full sets, so no list of literals repeats the vocabulary elsewhere.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self


class Term(StrEnum):
    """A StrEnum whose members carry a human label: `NAME = "value", "Label"`."""

    label: str

    def __new__(cls, value: str, label: str = "") -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label or value.replace("_", " ").capitalize()
        return member


def choices(terms: type[Term] | tuple[Term, ...]) -> list[tuple[str, str]]:
    """(value, label) pairs for a model field's, a form's or a serializer's `choices`."""
    return [(term.value, term.label) for term in terms]


def values(terms: type[Term] | tuple[Term, ...]) -> list[str]:
    return [term.value for term in terms]


class TurnRole(Term):
    CUSTOMER = "customer", "Customer"
    AGENT = "agent", "Agent"
    TOOL_CALL = "tool_call", "Tool call"
    TOOL_RESULT = "tool_result", "Tool result"
    # Only in snapshots (the system prompt as the summarizer saw it); never a stored turn.
    SYSTEM = "system", "System"


# The roles a turn of the thread may have (an agent posts them, an import carries them).
THREAD_ROLES = (TurnRole.CUSTOMER, TurnRole.AGENT, TurnRole.TOOL_CALL, TurnRole.TOOL_RESULT)
TOOL_ROLES = (TurnRole.TOOL_CALL, TurnRole.TOOL_RESULT)


class StateOp(Term):
    OPENED = "opened", "Ticket opened"
    ACTION_TAKEN = "action_taken", "Action taken"
    ACTION_INTENDED = "action_intended", "Action intended"
    ACTION_SETTLED = "action_settled", "Intended action settled"
    CONSTRAINT_STATED = "constraint_stated", "Constraint stated"
    QUESTION_OPENED = "question_opened", "Question opened"
    QUESTION_RESOLVED = "question_resolved", "Question resolved"
    DECISION_MADE = "decision_made", "Decision made"
    ACTION_ADDED = "action_added", "Missed action added"
    ACTION_REVERSED = "action_reversed", "Action marked reversed"
    CONSTRAINT_EDITED = "constraint_edited", "Constraint edited"


# The operations an agent may send to POST .../state/ (actions have their own endpoint).
AGENT_STATE_OPS = (
    StateOp.CONSTRAINT_STATED,
    StateOp.QUESTION_OPENED,
    StateOp.QUESTION_RESOLVED,
    StateOp.DECISION_MADE,
)
# What a supervisor may do: everything an agent may, plus add a missed action, mark one reversed,
# and edit a constraint's wording. Nothing is ever removed but a resolved question.
CORRECTION_OPS = (
    StateOp.ACTION_ADDED,
    StateOp.ACTION_REVERSED,
    StateOp.CONSTRAINT_STATED,
    StateOp.CONSTRAINT_EDITED,
    StateOp.QUESTION_OPENED,
    StateOp.QUESTION_RESOLVED,
    StateOp.DECISION_MADE,
)
# The events an imported turn may carry: an action taken, or what an agent may pin.
IMPORT_EVENT_OPS = (StateOp.ACTION_TAKEN, *AGENT_STATE_OPS)


class ActionStatus(Term):
    # intended: reserved before the tool ran; succeeded: the tool did it; failed: it did not (the item is free).
    INTENDED = "intended", "Intended"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


# What an agent may record an action as (absent means succeeded), and what it may settle an intent as.
RECORD_STATUSES = (ActionStatus.INTENDED, ActionStatus.SUCCEEDED)
SETTLE_STATUSES = (ActionStatus.SUCCEEDED, ActionStatus.FAILED)


class ActorKind(Term):
    AGENT = "agent", "Agent"
    SUPERVISOR = "supervisor", "Supervisor"
    SYSTEM = "system", "System"


class SummarizerBackend(Term):
    EXTRACTIVE = "extractive", "Extractive (offline)"
    OPENAI = "openai", "OpenAI-compatible server"
    SCRIPTED = "scripted", "Scripted (replays a fixed summary named by the model)"


class CompactionStatus(Term):
    PENDING = "pending", "Pending (queued)"
    RUNNING = "running", "Running"
    APPLIED = "applied", "Applied"
    FORCED = "forced", "Forced (hard ceiling)"
    FAILED = "failed", "Failed"
    DEFERRED = "deferred", "Deferred"
    OVER_BUDGET = "over_budget", "Over budget, no safe cut"
    SUPERSEDED = "superseded", "Superseded"

    @classmethod
    def replacing(cls) -> tuple[CompactionStatus, ...]:
        """The statuses whose summary replaced turns: the active summary is the newest of these."""
        return (cls.APPLIED, cls.FORCED)


class TurnOutcome(Term):
    """What the compaction policy did with a turn, as the turn's answer says it."""

    NOT_DUE = "not_due", "Not due"
    DEFERRED = "deferred", "Deferred"
    # Due at a boundary, but the compaction would free less than the class's minimum gain: not run.
    LOW_GAIN = "low_gain", "Not worth it (low gain)"
    QUEUED = "queued", "Queued"
    APPLIED = "applied", "Applied"
    FORCED = "forced", "Forced"
    FAILED = "failed", "Failed"
    OVER_BUDGET = "over_budget", "Over budget"
    SUPERSEDED = "superseded", "Superseded"

    @classmethod
    def of_event(cls, status: str) -> TurnOutcome:
        """The outcome a recorded compaction event reports: a pending or running one is queued."""
        if status in (CompactionStatus.PENDING, CompactionStatus.RUNNING):
            return cls.QUEUED
        return cls(status)
