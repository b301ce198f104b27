"""The payments ledger as the payment system reports it, and what the reconciler made of it.

A `LedgerEntry` is money the payment system moved; a `Reconciliation` is one outcome of comparing the entries
with the succeeded money actions in the tickets' pinned states (matched, or one of three mismatches); a
`LedgerResolution` is a supervisor's answer to a mismatch, kept for good (the outcomes are recomputed).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from tickets.models import Ticket


class LedgerKind(models.TextChoices):
    REFUND = "refund", "Refund"
    CHARGE = "charge", "Charge"
    CREDIT = "credit", "Credit"


class LedgerSource(models.TextChoices):
    IMPORT = "import", "import_ledger"
    WEBHOOK = "webhook", "Webhook"
    DEMO = "demo", "Demo data"


class LedgerEntry(models.Model):
    """Money the payment system moved. Its id is the payment system's: an entry sent twice is stored once."""

    entry_id = models.CharField(max_length=200, unique=True)
    ticket = models.ForeignKey(
        Ticket, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    # The order the money belongs to: the entry's own, or its ticket's when it named a ticket.
    order_id = models.CharField(max_length=64, db_index=True)
    kind = models.CharField(max_length=10, choices=LedgerKind.choices)
    amount_cents = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    occurred_at = models.DateTimeField(
        help_text="When the payment system moved the money (the entry's created_at)."
    )
    external_ref = models.CharField(max_length=200, blank=True)
    raw = models.JSONField(help_text="The entry as it was received.")
    source = models.CharField(max_length=10, choices=LedgerSource.choices)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["occurred_at", "pk"]
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(condition=Q(amount_cents__gt=0), name="ledger_entry_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.entry_id} {self.kind} {self.amount_cents} {self.currency}"


class Outcome(models.TextChoices):
    MATCHED = "matched", "Matched"
    UNRECORDED = "unrecorded", "Money moved, no action recorded"
    UNCONFIRMED = "unconfirmed", "Action recorded, the ledger never saw it"
    AMOUNT_DIFFERS = "amount_differs", "Amounts differ"

    @classmethod
    def mismatches(cls) -> list[str]:
        return [cls.UNRECORDED, cls.UNCONFIRMED, cls.AMOUNT_DIFFERS]


class Resolution(models.TextChoices):
    ADDED_ACTION = "added_action", "Missed action added"
    MARKED_FAILED = "marked_failed", "Action marked failed"
    ACCEPTED = "accepted", "Accepted"


class ReconciliationQuerySet(models.QuerySet["Reconciliation"]):
    def open_mismatches(self) -> ReconciliationQuerySet:
        """Mismatches nobody has accepted (one that a supervisor fixed is no longer a mismatch)."""
        return self.filter(outcome__in=Outcome.mismatches(), accepted_at__isnull=True)


class Reconciliation(models.Model):
    """One outcome of the reconciler: an entry, an action, or both. Recomputed on every run; an accepted
    mismatch stays accepted while its outcome is the same."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="ledger_outcomes")
    entry = models.ForeignKey(
        LedgerEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="outcomes"
    )
    action_id = models.CharField(max_length=20, blank=True, help_text="The action (A3), when there is one.")
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    kind = models.CharField(max_length=10, choices=LedgerKind.choices)
    entry_amount_cents = models.BigIntegerField(null=True, blank=True)
    action_amount_cents = models.BigIntegerField(null=True, blank=True)
    matched_by = models.CharField(
        max_length=20, blank=True, help_text="external_ref or window, when matched."
    )
    explanation = models.TextField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    accepted_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ReconciliationQuerySet.as_manager()

    class Meta:
        ordering = ["ticket", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["entry"], condition=Q(entry__isnull=False), name="reconciliation_one_per_entry"
            ),
            models.UniqueConstraint(
                fields=["ticket", "action_id"],
                condition=~Q(action_id=""),
                name="reconciliation_one_per_action",
            ),
            models.CheckConstraint(
                condition=Q(entry__isnull=False) | ~Q(action_id=""), name="reconciliation_entry_or_action"
            ),
        ]
        indexes = [
            models.Index(
                fields=["ticket"],
                name="reconciliation_open_mismatch",
                condition=Q(
                    outcome__in=["unrecorded", "unconfirmed", "amount_differs"], accepted_at__isnull=True
                ),
            )
        ]

    def __str__(self) -> str:
        return f"{self.ticket_id} {self.outcome} entry={self.entry_id} action={self.action_id or '-'}"

    @property
    def is_open(self) -> bool:
        return self.outcome != Outcome.MATCHED and self.accepted_at is None


class LedgerResolution(models.Model):
    """A supervisor's answer to a mismatch, kept as it was given (append-only)."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="ledger_resolutions")
    resolution = models.CharField(max_length=20, choices=Resolution.choices)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, help_text="The mismatch resolved.")
    entry_id = models.CharField(
        max_length=200, blank=True, help_text="The ledger entry's id, when there is one."
    )
    action_id = models.CharField(max_length=20, blank=True, help_text="The action it concerned or added.")
    explanation = models.TextField(help_text="What the reconciler said about the mismatch.")
    reason = models.TextField()
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["ticket", "-created_at"], name="ledger_resolution_ticket_time")]

    def __str__(self) -> str:
        return f"{self.ticket_id} {self.resolution} ({self.outcome})"
