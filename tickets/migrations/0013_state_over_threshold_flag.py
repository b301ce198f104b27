"""Ticket.state_over_threshold stored, with a partial index, so the queue's filter on it reads the flagged tickets
instead of every ticket joined to its state and class (the computed filter walked all 100,000 tickets of a queue
where none matched). Filled here from the stored counts, as Ticket.objects.state_fills_threshold() computes it."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.models import F, IntegerField, Value
from django.db.models.functions import Cast, Floor

REPLY_PRIMING_TOKENS = 3  # tickets.tokens.REPLY_PRIMING_TOKENS when this was written


def fill(apps: Any, schema_editor: Any) -> None:
    Ticket = apps.get_model("tickets", "Ticket")
    over = (
        Ticket.objects.alias(
            floor=F("system_prompt_tokens") + F("pinned_state__tokens") + Value(REPLY_PRIMING_TOKENS),
            threshold=Cast(
                Floor(F("ticket_class__token_budget") * F("ticket_class__compaction_threshold")),
                IntegerField(),
            ),
        )
        .filter(floor__gte=F("threshold"))
        .values("pk")
    )
    Ticket.objects.filter(pk__in=over).update(state_over_threshold=True)


class Migration(migrations.Migration):
    dependencies = [("tickets", "0012_pinned_state_lz4")]

    operations = [
        migrations.AddField(
            model_name="ticket",
            name="state_over_threshold",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("state_over_threshold", True)), fields=["-id"], name="ticket_state_full"
            ),
        ),
    ]
