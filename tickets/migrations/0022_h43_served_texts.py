"""The agent-facing state kept as the text it is served as (PinnedState.served_*, core.state_text): each list's
items as JSON, joined, compressed with lz4 on PostgreSQL like `data`. They replace the stored document
(`agent_data`, 0020): an action edited it four times over (the action, the version, the totals), each a rewrite
of the whole jsonb (about 20 ms of an action's UPDATE at 2,000 actions). Rows get their texts at their next
change; until then a read builds the state from its items."""

from typing import Any

from django.db import migrations, models


LISTS = ("actions", "model_actions", "constraints", "questions", "decisions")
COLUMNS = tuple(f"served_{name}" for name in LISTS)
ALTERS = "\n".join(
    f"    ALTER TABLE tickets_pinnedstate ALTER COLUMN {column} SET COMPRESSION lz4;" for column in COLUMNS
)
LZ4 = f"""
DO $$
BEGIN
{ALTERS}
EXCEPTION WHEN feature_not_supported OR syntax_error OR undefined_object THEN
    RAISE NOTICE 'lz4 is not available: the served texts keep pglz';
END
$$;
"""


def use_lz4(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LZ4)


class Migration(migrations.Migration):
    dependencies = [
        ("tickets", "0021_h38_queue_event_figures"),
    ]

    operations = [
        migrations.RemoveField(model_name="pinnedstate", name="agent_data"),
        migrations.AddField(
            model_name="pinnedstate",
            name="served_actions",
            field=models.TextField(blank=True, default="", editable=False, null=True),
        ),
        migrations.AddField(
            model_name="pinnedstate",
            name="served_constraints",
            field=models.TextField(blank=True, default="", editable=False, null=True),
        ),
        migrations.AddField(
            model_name="pinnedstate",
            name="served_decisions",
            field=models.TextField(blank=True, default="", editable=False, null=True),
        ),
        migrations.AddField(
            model_name="pinnedstate",
            name="served_model_actions",
            field=models.TextField(blank=True, default="", editable=False, null=True),
        ),
        migrations.AddField(
            model_name="pinnedstate",
            name="served_questions",
            field=models.TextField(blank=True, default="", editable=False, null=True),
        ),
        migrations.AddField(
            model_name="pinnedstate",
            name="served_tail",
            field=models.TextField(blank=True, default="", editable=False, null=True),
        ),
        migrations.AddField(
            model_name="pinnedstate",
            name="served_version",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(use_lz4, migrations.RunPython.noop),
    ]
