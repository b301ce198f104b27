"""The audit keeps what each state change did to one item instead of two copies of the whole state.

Existing rows get their `change` from the difference of their `before` and `after` documents; then the
copies go.
"""

from __future__ import annotations

from django.db import migrations, models

ITEM_LISTS = ("actions_taken", "customer_constraints", "open_questions", "decisions")
MONEY_TOTALS = ("refunded_cents_total", "charged_cents_total", "credited_cents_total")


def delta(before: dict, after: dict, subject_id: str) -> dict:
    """The one item that differs between the two documents (the subject, when the row names one)."""
    items = []
    for category in ITEM_LISTS:
        old = {i.get("id"): i for i in before.get(category) or []}
        new = {i.get("id"): i for i in after.get(category) or []}
        ids = [i for i in new if old.get(i) != new[i]] + [i for i in old if i not in new]
        items += [{"category": category, "before": old.get(i), "after": new.get(i)} for i in ids]
    change: dict = {"items": items} if items else {}
    totals = {
        name: [before.get(name, 0), after.get(name, 0)]
        for name in MONEY_TOTALS
        if before and before.get(name, 0) != after.get(name, 0)
    }
    if totals:
        change["totals"] = totals
    return change


def forwards(apps, schema_editor):
    StateChange = apps.get_model("tickets", "StateChange")
    batch = []
    for row in StateChange.objects.only("before", "after", "subject_id").iterator(chunk_size=500):
        row.change = delta(row.before or {}, row.after or {}, row.subject_id)
        batch.append(row)
        if len(batch) >= 500:
            StateChange.objects.bulk_update(batch, ["change"])
            batch = []
    if batch:
        StateChange.objects.bulk_update(batch, ["change"])


class Migration(migrations.Migration):
    dependencies = [("tickets", "0010_queue_keyset_indexes")]

    operations = [
        migrations.AddField(
            model_name="statechange",
            name="change",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="What the change did, item by item (tickets.state.ItemChange), and the money totals it "
        "moved; empty when the ticket was opened. The state as of any version is these, replayed in order.",
            ),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop, elidable=True),
        migrations.RemoveField(model_name="statechange", name="before"),
        migrations.RemoveField(model_name="statechange", name="after"),
    ]
