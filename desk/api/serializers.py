"""Input serializers (strict: known fields, JSON types as they are) and output serializers (the schema).

No business rules here: the services decide what is allowed; these only say what shape a request has.

One module although it is over 400 lines: it is the API's schema (desk/api/schema.py reads it), thirty short
classes nesting into one another (TicketOut holds TokensOut and CompactionTotalsOut, CoverageOut the refs),
so one file reads as the document it produces.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.state import PROVENANCES
from core.vocabulary import (
    AGENT_STATE_OPS,
    RECORD_STATUSES,
    SETTLE_STATUSES,
    THREAD_ROLES,
    ActionStatus,
    TurnOutcome,
    values,
)
from desk.api.fields import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictRegexField,
    StrictSerializer,
)
from desk.api.selectors import ticket_class_by_slug
from tickets.models import TicketClass, TicketStatus

# Bounds that keep every value inside what the columns (PostgreSQL integer) can hold.
MAX_INT = 2**31 - 1
TICKET_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"


# ---------------------------------------------------------------- input


class TicketIn(StrictSerializer):
    ticket_id = StrictRegexField(TICKET_ID_PATTERN, max_length=64, help_text="The external id, e.g. T-40118.")
    order_id = StrictCharField(max_length=64)
    seller_type = StrictCharField(max_length=40)
    ticket_class = StrictRegexField(r"^[-a-zA-Z0-9_]+$", max_length=64, help_text="A ticket class slug.")
    system_prompt = StrictCharField(
        required=False, trim_whitespace=False, max_length=20000, help_text="Defaults to the class's prompt."
    )

    def validate_ticket_class(self, value: str) -> TicketClass:
        found = ticket_class_by_slug(value)
        if found is None:
            raise serializers.ValidationError(f"No ticket class with slug {value!r}.")
        return found


class TicketStatusIn(StrictSerializer):
    status = serializers.ChoiceField(
        choices=TicketStatus.choices, help_text="open, waiting, resolved or escalated."
    )
    reason = StrictCharField(
        required=False, allow_blank=True, max_length=2000, default="", help_text="Kept in the status audit."
    )


class TurnIn(StrictSerializer):
    role = serializers.ChoiceField(choices=values(THREAD_ROLES))
    content = StrictCharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    tool = StrictCharField(required=False, allow_blank=True, max_length=100, default="")
    args = JSONObjectField(required=False, allow_null=True, default=None)
    tool_call_id = StrictCharField(required=False, allow_blank=True, max_length=100, default="")
    boundary = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=40,
        default="",
        help_text="The resolution step this turn completes (reply_sent, refund_issued, ...), if any.",
    )


class ActionIn(StrictSerializer):
    tool = StrictCharField(max_length=100)
    item = StrictCharField(required=False, allow_blank=True, max_length=200, default="")
    amount_cents = StrictIntegerField(required=False, min_value=0, max_value=10**12, default=0)
    at_turn = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_INT, default=None
    )
    reversible = StrictBooleanField(required=False, default=False)
    args = JSONObjectField(required=False, allow_null=True, default=None)
    repeat_of_earlier = StrictBooleanField(
        required=False, default=False, help_text="Set with a reason to record a deliberate second action."
    )
    reason = StrictCharField(required=False, allow_blank=True, max_length=2000, default="")
    status = serializers.ChoiceField(
        choices=values(RECORD_STATUSES),
        required=False,
        allow_null=True,
        default=None,
        help_text="intended: reserve the action before its tool runs (settle it with PATCH afterwards); "
        "absent or succeeded: the tool already succeeded.",
    )
    expects = JSONObjectField(
        required=False,
        allow_null=True,
        default=None,
        help_text="What the agent believes of the ticket's money, from the state it was given: any of "
        "refunded_cents_total, charged_cents_total, credited_cents_total, and succeeded_count (the succeeded "
        "actions of this tool). A figure that is not the desk's, or that an unsettled intent may still move, "
        "is refused with 409 belief_stale before the tool runs.",
    )
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field named source (DRF pops declared fields)
        choices=["tool_result", "customer_turn", "agent_inference"],
        required=False,
        allow_null=True,
        default=None,
        help_text="How the agent knows it: the tool's result, the customer's own turn, or its own inference.",
    )


class HandoffIn(StrictSerializer):
    from_agent = StrictCharField(max_length=200, help_text="The agent handing the ticket over.")
    to_agent = StrictCharField(max_length=200, help_text="The agent receiving it.")
    given = JSONObjectField(
        required=False,
        allow_null=True,
        default=None,
        help_text="What the receiving agent was given (e.g. the turns a handoff filter kept, a note).",
    )


class ActionSettleIn(StrictSerializer):
    status = serializers.ChoiceField(choices=values(SETTLE_STATUSES))
    reason = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        default="",
        help_text="Required when the intent failed: what the tool answered.",
    )
    external_ref = StrictCharField(
        required=False,
        allow_null=True,
        max_length=200,
        default=None,
        help_text="The payment system's reference for the money the tool moved (a refund or charge id): the "
        "ledger reconciler matches on it first.",
    )


class StateChangeIn(StrictSerializer):
    op = serializers.ChoiceField(choices=values(AGENT_STATE_OPS))
    text = StrictCharField(
        max_length=2000,
        help_text="The constraint, question or decision; for question_resolved its id (Q1) or text.",
    )
    at_turn = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_INT, default=None
    )
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field named source (DRF pops declared fields)
        choices=["tool_result", "customer_turn", "agent_inference"],
        required=False,
        allow_null=True,
        default=None,
        help_text="How the agent knows it: the tool's result, the customer's own turn, or its own inference.",
    )


# ---------------------------------------------------------------- output


class ErrorOut(serializers.Serializer):
    error = serializers.CharField(help_text="A stable code: invalid, not_found, repeat_refused, ...")
    message = serializers.CharField(help_text="What was wrong, in words.")


class TokensOut(serializers.Serializer):
    system = serializers.IntegerField()
    state = serializers.IntegerField()
    summary = serializers.IntegerField()
    turns = serializers.IntegerField()
    framing = serializers.IntegerField()
    total = serializers.IntegerField()


class CompactionTotalsOut(serializers.Serializer):
    applied = serializers.IntegerField()
    failed = serializers.IntegerField()
    deferred = serializers.IntegerField()
    tokens_saved = serializers.IntegerField()
    summarizer_input_tokens = serializers.IntegerField()
    summarizer_output_tokens = serializers.IntegerField()
    cost_usd = serializers.DecimalField(
        max_digits=12, decimal_places=6, help_text="Summarizer cost in US dollars."
    )
    latency_ms = serializers.IntegerField()


class LedgerCountsOut(serializers.Serializer):
    matched = serializers.IntegerField(help_text="Ledger entries that confirm a succeeded money action.")
    unrecorded = serializers.IntegerField(help_text="Money the ledger moved that no action records (open).")
    unconfirmed = serializers.IntegerField(
        help_text="Succeeded money actions the ledger has no entry for after the grace period (open)."
    )
    amount_differs = serializers.IntegerField(
        help_text="An entry and its action disagree on the amount (open)."
    )
    accepted = serializers.IntegerField(help_text="Mismatches a supervisor accepted with a reason.")


class TicketOut(serializers.Serializer):
    ticket_id = serializers.CharField()
    order_id = serializers.CharField()
    seller_type = serializers.CharField()
    ticket_class = serializers.CharField()
    status = serializers.CharField()
    turn_count = serializers.IntegerField()
    state_version = serializers.IntegerField()
    tokens = TokensOut()
    token_budget = serializers.IntegerField()
    threshold_tokens = serializers.IntegerField()
    first_active_turn = serializers.IntegerField()
    state_over_threshold = serializers.BooleanField(
        help_text="The system prompt and pinned state alone reach the threshold: compacting turns cannot bring "
        "the request under it, so the desk does not try (raise the class budget or trim the state)."
    )
    compaction_totals = CompactionTotalsOut(help_text="What compaction did and cost on this ticket.")
    ledger = LedgerCountsOut(help_text="The payments ledger reconciled with the ticket's money actions.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ActionOut(serializers.Serializer):
    id = serializers.CharField()
    at_turn = serializers.IntegerField(allow_null=True)
    tool = serializers.CharField()
    item = serializers.CharField(allow_blank=True)
    amount_cents = serializers.IntegerField()
    reversible = serializers.BooleanField()
    args = serializers.DictField()
    idempotency_key = serializers.CharField(allow_null=True)
    recorded_by = serializers.CharField()
    repeat_of = serializers.CharField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    reversed = serializers.BooleanField()
    reversed_reason = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(
        choices=values(ActionStatus),
        help_text="intended: reserved, its tool not yet settled; a failed intent no longer holds its item.",
    )
    failure_reason = serializers.CharField(allow_blank=True)
    external_ref = serializers.CharField(
        required=False, help_text="The payment system's reference, once a settle carried one."
    )
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field named source (DRF pops declared fields)
        choices=list(PROVENANCES),
        required=False,
        help_text="How the desk knows it (absent when nobody said): tool_result, customer_turn, "
        "agent_inference, supervisor_correction or ledger_entry.",
    )


class TextItemOut(serializers.Serializer):
    id = serializers.CharField()
    at_turn = serializers.IntegerField(allow_null=True)
    text = serializers.CharField()
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field named source (DRF pops declared fields)
        choices=list(PROVENANCES),
        required=False,
        help_text="How the desk knows it (absent when nobody said): tool_result, customer_turn, "
        "agent_inference, supervisor_correction or ledger_entry.",
    )


class PinnedStateOut(serializers.Serializer):
    ticket = serializers.CharField()
    order = serializers.CharField()
    seller_type = serializers.CharField()
    version = serializers.IntegerField()
    actions_taken = ActionOut(many=True)
    customer_constraints = TextItemOut(many=True)
    open_questions = TextItemOut(many=True)
    decisions = TextItemOut(many=True)
    refunded_cents_total = serializers.IntegerField(
        help_text="Succeeded, non-reversed actions of the class's refund tools."
    )
    charged_cents_total = serializers.IntegerField(help_text="The same, for the class's charge tools.")
    credited_cents_total = serializers.IntegerField(help_text="The same, for the class's credit tools.")


class ModelActionOut(serializers.Serializer):
    """An action as the model reads it in the context: no idempotency key, no recording metadata."""

    id = serializers.CharField()
    at_turn = serializers.IntegerField(allow_null=True)
    tool = serializers.CharField()
    item = serializers.CharField(allow_blank=True)
    amount_cents = serializers.IntegerField()
    reversible = serializers.BooleanField()
    args = serializers.DictField()
    repeat_of = serializers.CharField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    reversed = serializers.BooleanField()
    reversed_reason = serializers.CharField(allow_blank=True)


class ModelStateOut(serializers.Serializer):
    """The pinned state as the model reads it (core.state.model_state)."""

    ticket = serializers.CharField()
    order = serializers.CharField()
    seller_type = serializers.CharField()
    version = serializers.IntegerField()
    actions_taken = ModelActionOut(many=True)
    customer_constraints = TextItemOut(many=True)
    open_questions = TextItemOut(many=True)
    decisions = TextItemOut(many=True)
    refunded_cents_total = serializers.IntegerField()


class SummaryOut(serializers.Serializer):
    decisions = serializers.ListField(child=serializers.CharField(allow_blank=True))
    actions_taken = serializers.ListField(child=serializers.CharField(allow_blank=True))
    customer_constraints = serializers.ListField(child=serializers.CharField(allow_blank=True))
    open_questions = serializers.ListField(child=serializers.CharField(allow_blank=True))
    narrative = serializers.CharField(allow_blank=True)


class ContextTurnOut(serializers.Serializer):
    number = serializers.IntegerField()
    role = serializers.CharField()
    content = serializers.CharField(allow_blank=True)
    tool = serializers.CharField(allow_blank=True)
    args = serializers.JSONField(allow_null=True)
    tool_call_id = serializers.CharField(allow_blank=True)
    boundary = serializers.CharField(allow_blank=True)
    tokens = serializers.IntegerField()


class PendingCompactionOut(serializers.Serializer):
    number = serializers.IntegerField()
    since = serializers.DateTimeField()
    running = serializers.BooleanField()
    upto_turn = serializers.IntegerField(allow_null=True)


class ContextOut(serializers.Serializer):
    system_prompt = serializers.CharField(allow_blank=True)
    pinned_state = ModelStateOut()
    summary = SummaryOut(allow_null=True)
    summary_covers_turns = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    turns = ContextTurnOut(many=True)
    tokens = TokensOut()
    token_budget = serializers.IntegerField()
    threshold_tokens = serializers.IntegerField()
    compaction_pending = PendingCompactionOut(
        allow_null=True, help_text="A compaction claimed and not applied yet (a worker runs it), or null."
    )


class CoverageRefOut(serializers.Serializer):
    category = serializers.CharField()
    id = serializers.CharField(allow_null=True)
    at_turn = serializers.IntegerField(allow_null=True)
    label = serializers.CharField(allow_blank=True)  # type: ignore[assignment]  # a field, not Field.label


class CoverageMissOut(CoverageRefOut):
    why = serializers.CharField(help_text="Why the summary does not cover the item.")


class CoverageOut(serializers.Serializer):
    covered = CoverageRefOut(many=True)
    missing = CoverageMissOut(many=True)


class PolicyOutcomeOut(serializers.Serializer):
    """What the compaction policy did with the turn; the event's figures when it recorded one."""

    status = serializers.ChoiceField(
        choices=values(TurnOutcome),
        help_text=(
            "queued: a compaction is pending (a worker runs it; pending_since says since when); forced: the hard "
            "ceiling compacted before a boundary; over_budget: the request exceeds the budget and no safe cut exists; "
            "low_gain: due at a boundary, but the compaction would free less than the class's minimum gain "
            "(expected_gain, min_gain), so none ran."
        ),
    )
    reason = serializers.CharField(
        required=False, help_text="Why it deferred, was forced, failed or is over budget."
    )
    state_over_threshold = serializers.BooleanField(
        required=False,
        help_text=(
            "Present (true) when the system prompt and pinned state alone reach the threshold: compaction is "
            "skipped, since replacing turns cannot help; reason says by how much."
        ),
    )
    state_crowded = serializers.BooleanField(
        required=False,
        help_text=(
            "Present (true) when the system prompt and pinned state leave less room under the threshold than one "
            "compaction must free (the class's min_gain_share of the budget): no compaction at the threshold pays, "
            "so the request runs over the threshold until one does; the hard ceiling still holds."
        ),
    )
    expected_gain = serializers.IntegerField(
        required=False, help_text="low_gain: the tokens the compaction would have freed (estimated)."
    )
    min_gain = serializers.IntegerField(
        required=False,
        help_text="low_gain: the tokens a compaction must free to run (the class's minimum gain).",
    )
    pending_since = serializers.DateTimeField(required=False)
    upto_turn = serializers.IntegerField(required=False)
    running = serializers.BooleanField(
        required=False, help_text="True once a worker has started the pending compaction."
    )
    number = serializers.IntegerField(required=False)
    at_turn = serializers.IntegerField(required=False)
    replaced_turns = serializers.ListField(child=serializers.IntegerField(), allow_null=True, required=False)
    tokens_before = serializers.IntegerField(required=False)
    tokens_after = serializers.IntegerField(allow_null=True, required=False)
    coverage_missing = CoverageMissOut(many=True, required=False)

    def to_representation(self, instance: dict[str, Any]) -> dict[str, Any]:
        # The event's figures appear only when the policy recorded an event; absent is not null.
        return {k: v for k, v in super().to_representation(instance).items() if k in instance}


class TurnAppendedOut(serializers.Serializer):
    turn = serializers.IntegerField(help_text="The new turn's number.")
    tokens = serializers.IntegerField(help_text="The new turn's tokens.")
    context_tokens = serializers.IntegerField(help_text="The assembled request's tokens after this turn.")
    threshold_tokens = serializers.IntegerField()
    token_budget = serializers.IntegerField()
    compaction = PolicyOutcomeOut()


class ActionRecordedOut(serializers.Serializer):
    action = ActionOut()
    state_version = serializers.IntegerField()
    refunded_cents_total = serializers.IntegerField()
    # Absent from answers stored (and replayed) before these totals existed.
    charged_cents_total = serializers.IntegerField(required=False)
    credited_cents_total = serializers.IntegerField(required=False)


class HistoryActorOut(serializers.Serializer):
    kind = serializers.CharField(help_text="agent, supervisor or system.")
    username = serializers.CharField(allow_null=True)


class HistoryEntryOut(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=[
            "turn",
            "state_change",
            "action",
            "correction",
            "refused_attempt",
            "status_change",
            "compaction",
            "review",
            "ledger",
            "handoff",
        ],
        help_text="review: a supervisor's verdict on a compaction (detail: compaction, verdict, comment).",
    )
    at = serializers.DateTimeField(help_text="When it happened.")
    by = HistoryActorOut(help_text="Who did it.")
    thread_turn = serializers.IntegerField(
        allow_null=True, help_text="The ticket's newest turn at the time (the turn itself for a turn)."
    )
    summary = serializers.CharField(help_text="One line, in words.")
    detail = serializers.DictField(help_text="The kind's own fields.")


class HistoryPageOut(serializers.Serializer):
    count = serializers.IntegerField(help_text="Entries in the whole history.")
    page = serializers.IntegerField()
    page_size = serializers.IntegerField()
    next = serializers.CharField(allow_null=True, help_text="The next (older) page's address.")
    previous = serializers.CharField(allow_null=True)
    results = HistoryEntryOut(many=True)


class CompactionOut(serializers.Serializer):
    number = serializers.IntegerField()
    at_turn = serializers.IntegerField()
    status = serializers.CharField()
    replaced_turns = serializers.SerializerMethodField()
    tokens_before = serializers.IntegerField()
    tokens_after = serializers.IntegerField(allow_null=True)
    tokens_saved = serializers.IntegerField()
    threshold_tokens = serializers.IntegerField()
    attempts = serializers.IntegerField()
    validation_errors = serializers.ListField(child=serializers.CharField(allow_blank=True))
    summarizer_backend = serializers.CharField(allow_blank=True)
    summarizer_model = serializers.CharField(allow_blank=True)
    latency_ms = serializers.IntegerField()
    summarizer_input_tokens = serializers.IntegerField()
    summarizer_output_tokens = serializers.IntegerField()
    cost_usd = serializers.DecimalField(max_digits=12, decimal_places=6)
    coverage = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField(), allow_null=True))
    def get_replaced_turns(self, event: Any) -> list[int] | None:
        if event.first_replaced_turn is None or event.last_replaced_turn is None:
            return None
        return [event.first_replaced_turn, event.last_replaced_turn]

    @extend_schema_field(CoverageOut)
    def get_coverage(self, event: Any) -> dict[str, Any]:
        coverage = event.coverage or {}
        return {"covered": coverage.get("covered", []), "missing": coverage.get("missing", [])}
