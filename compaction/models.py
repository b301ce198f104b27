from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from core.vocabulary import CompactionStatus, choices
from tickets.models import Ticket


class CompactionEventQuerySet(models.QuerySet["CompactionEvent"]):
    def applied(self) -> CompactionEventQuerySet:
        """Compactions whose summary replaced turns (at a boundary or forced by the hard ceiling)."""
        return self.filter(status__in=CompactionStatus.replacing())

    def pending(self) -> CompactionEventQuerySet:
        """Claimed and not finished: queued for a run, or running."""
        return self.filter(status__in=[CompactionStatus.PENDING, CompactionStatus.RUNNING])

    def worth_review(self) -> CompactionEventQuerySet:
        """Events a supervisor should look at: a summary that missed a pinned item, or a compaction
        that was forced by the hard ceiling, found no safe cut, or failed."""
        return self.filter(
            Q(coverage_missing_count__gt=0)
            | Q(status__in=[CompactionStatus.FORCED, CompactionStatus.OVER_BUDGET, CompactionStatus.FAILED])
        )

    def unreviewed(self) -> CompactionEventQuerySet:
        return self.exclude(reviews__isnull=False)


class CompactionEvent(models.Model):
    """One decision of the compaction policy that did something: applied, failed or deferred."""

    # No index of its own: (ticket, number) is unique, and its index serves every lookup by ticket. A ticket-only
    # index let the planner, estimating one event per ticket, read all 7,140 of a long ticket's and sort them to
    # find its newest applied one (17 ms of every context read) instead of probing `event_active`.
    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="compactions", db_index=False)
    number = models.PositiveIntegerField(help_text="1 for the ticket's first event, 2 for the next, ...")
    at_turn = models.PositiveIntegerField(help_text="The turn whose append triggered this event.")
    upto_turn = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The newest turn the compaction may replace up to: later boundaries join a pending one.",
    )
    status = models.CharField(max_length=20, choices=choices(CompactionStatus))
    reason = models.TextField(blank=True, help_text="Why it was forced, failed, superseded or over budget.")
    first_replaced_turn = models.PositiveIntegerField(null=True, blank=True)
    last_replaced_turn = models.PositiveIntegerField(null=True, blank=True)
    tokens_before = models.PositiveIntegerField()
    tokens_after = models.PositiveIntegerField(null=True, blank=True)
    threshold_tokens = models.PositiveIntegerField()
    token_budget = models.PositiveIntegerField(default=0, help_text="The class budget in force at the time.")
    attempts = models.PositiveSmallIntegerField(default=0)
    validation_errors = models.JSONField(default=list, blank=True)
    summarizer_backend = models.CharField(max_length=20, blank=True)
    summarizer_model = models.CharField(max_length=100, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    summarizer_input_tokens = models.PositiveIntegerField(default=0)
    summarizer_output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    summary = models.JSONField(null=True, blank=True, help_text="The validated Summary, when applied.")
    summary_tokens = models.PositiveIntegerField(default=0)
    coverage = models.JSONField(default=dict, blank=True, help_text='{"covered": [...], "missing": [...]}')
    coverage_missing_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(
        auto_now_add=True, help_text="When it was claimed (queued) or recorded."
    )
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the summarizer call began.")
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=(
            "Until when the claim is somebody's: the worker it was queued for (pending) or the run that took it "
            "(running). Past it, the next boundary (or a worker) retakes it."
        ),
    )

    objects = CompactionEventQuerySet.as_manager()

    class Meta:
        ordering = ["ticket", "number"]
        indexes = [
            # The queue's flags: a few events among many, found without reading the rest.
            models.Index(
                fields=["ticket"], condition=Q(coverage_missing_count__gt=0), name="event_coverage_miss"
            ),
            models.Index(fields=["ticket"], condition=Q(status="failed"), name="event_failed"),
            models.Index(
                fields=["ticket", "tokens_before"], condition=Q(status="deferred"), name="event_deferred"
            ),
            # The active summary an agent's context reads on every turn: the newest applied event in one probe,
            # however many events the ticket has.
            models.Index(
                fields=["ticket", "-number"],
                condition=Q(status__in=["applied", "forced"]),
                name="event_active",
            ),
            # The claim an agent's context reads on every turn: one probe, however many events the ticket has.
            models.Index(
                fields=["ticket", "-number"],
                condition=Q(status__in=["pending", "running"]),
                name="event_claim",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "number"], name="compaction_number_unique_per_ticket"),
            # A turn compacts at most once, whatever retries and concurrent requests do.
            models.UniqueConstraint(fields=["ticket", "at_turn"], name="one_compaction_event_per_turn"),
            models.CheckConstraint(
                condition=~Q(status__in=["applied", "forced"])
                | (Q(first_replaced_turn__isnull=False) & Q(last_replaced_turn__isnull=False)),
                name="applied_compaction_names_its_turns",
            ),
            # At most one compaction waits for the worker per ticket: later boundaries join it.
            models.UniqueConstraint(
                fields=["ticket"], condition=Q(status="pending"), name="one_pending_compaction_per_ticket"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.ticket_id} compaction {self.number} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse(
            "compaction-review", kwargs={"ticket_id": self.ticket.ticket_id, "number": self.number}
        )

    @property
    def tokens_saved(self) -> int:
        return tokens_saved(self.tokens_before, self.tokens_after)


def tokens_saved(tokens_before: int, tokens_after: int | None) -> int:
    """What a compaction took off the request (nothing when it replaced nothing)."""
    if tokens_after is None:
        return 0
    return max(tokens_before - tokens_after, 0)


class ContextSnapshot(models.Model):
    """Both sides of a compaction, immutable: the context as it would have been sent, and its summary."""

    event = models.OneToOneField(CompactionEvent, on_delete=models.PROTECT, related_name="snapshot")
    messages = models.JSONField(help_text="The full pre-compaction request, message by message.")
    pinned_state = models.JSONField(help_text="The pinned state at the time, as sent.")
    summary = models.JSONField(null=True, blank=True, help_text="The summary that replaced the turns.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"snapshot of {self.event}"


class ReviewVerdict(models.TextChoices):
    FINE = "fine", "Fine"
    SUMMARY_BAD = "summary_bad", "Summary bad"
    STATE_CORRECTED = "state_corrected", "State corrected"


class CompactionReview(models.Model):
    """A supervisor's verdict on one compaction, with a comment. Append-only: a second look adds a row,
    and the newest row is the event's current verdict."""

    event = models.ForeignKey(CompactionEvent, on_delete=models.PROTECT, related_name="reviews")
    verdict = models.CharField(max_length=20, choices=ReviewVerdict.choices)
    comment = models.TextField(blank=True)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["event", "created_at", "pk"]
        indexes = [models.Index(fields=["event", "-created_at"], name="review_event_newest")]

    def __str__(self) -> str:
        return f"{self.event} reviewed {self.verdict}"
