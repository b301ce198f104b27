"""The queue row's figures of a ticket's compaction events and refusals stored on the ticket, filled from the
events already there (compaction.queue_figures.figures_from_events, with this migration's models)."""

from typing import Any


from django.db import migrations, models


def fill_figures(apps: Any, schema_editor: Any) -> None:
    from compaction.queue_figures import figures_from_events

    figures = figures_from_events(
        apps.get_model("compaction", "CompactionEvent"),
        apps.get_model("compaction", "CompactionReview"),
        apps.get_model("tickets", "RefusedAttempt"),
    )
    apps.get_model("tickets", "Ticket").objects.update(**figures)


class Migration(migrations.Migration):
    dependencies = [
        ("tickets", "0020_h36_agent_state"),
        ("compaction", "0006_h27_compaction_lease"),
    ]

    operations = [
        migrations.AddField(
            model_name="ticket",
            name="compaction_count",
            field=models.PositiveIntegerField(default=0, help_text="Events whose summary replaced turns."),
        ),
        migrations.AddField(
            model_name="ticket",
            name="has_coverage_miss",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="ticket",
            name="has_failed",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="ticket",
            name="has_forced",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="ticket",
            name="has_no_safe_cut",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="ticket",
            name="has_refused",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="ticket",
            name="needs_review",
            field=models.BooleanField(default=False, help_text="An event worth review has no review yet."),
        ),
        migrations.AddField(
            model_name="ticket",
            name="pending_deferral",
            field=models.BooleanField(default=False, help_text="The newest event is a deferral."),
        ),
        migrations.RunPython(fill_figures, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("needs_review", True)), fields=["-id"], name="ticket_needs_review"
            ),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("has_coverage_miss", True)), fields=["-id"], name="ticket_coverage_miss"
            ),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("has_forced", True), ("has_no_safe_cut", True), _connector="OR"),
                fields=["-id"],
                name="ticket_forced",
            ),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("has_failed", True)), fields=["-id"], name="ticket_failed"
            ),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("has_refused", True)), fields=["-id"], name="ticket_refused"
            ),
        ),
    ]
