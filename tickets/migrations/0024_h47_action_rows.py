"""A state's actions as rows of their own (StateAction, with their item keys in StateActionKey), moved out of
`PinnedState.data` with their served texts (the two served_*actions columns go): recording an action wrote the
whole document and both texts again, so an action's write grew with the state (36.5 against 6.3 ms at 2,000
actions, `make bench` of 63213fe); now it writes its own rows. Each state gets its action count and money figures.
An action that no longer validates is moved as stored (its state's reads fail on it as they did before)."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from pydantic import ValidationError

from core.identity import action_keys
from core.state import ActionFigures, ActionItem, stored_open_intent
from core.state_text import action_texts

BATCH = 500


def move_actions_to_rows(apps: Any, schema_editor: Any) -> None:
    PinnedState = apps.get_model("tickets", "PinnedState")
    StateAction = apps.get_model("tickets", "StateAction")
    StateActionKey = apps.get_model("tickets", "StateActionKey")
    states = PinnedState.objects.order_by("pk").only("pk", "data")
    changed, rows, keys = [], [], []
    for pinned in states.iterator(chunk_size=BATCH):
        data = dict(pinned.data or {})
        actions = data.pop("actions_taken", None) or []
        figures = ActionFigures()
        for number, raw in enumerate(actions, start=1):
            try:
                stored = ActionItem.model_validate(raw).model_dump(mode="json")
            except ValidationError:
                stored = raw
            served, served_model = action_texts(stored)
            rows.append(
                StateAction(
                    state_id=pinned.pk,
                    number=number,
                    data=stored,
                    served=served,
                    served_model=served_model,
                    open_intent=stored_open_intent(stored),
                )
            )
            keys.extend(
                StateActionKey(state_id=pinned.pk, number=number, key=key)
                for key in action_keys(str(stored.get("item") or ""), stored.get("args"))
            )
            if isinstance(stored.get("tool"), str):
                figures.apply(None, stored)
        pinned.data = data
        pinned.action_count = len(actions)
        pinned.action_figures = figures.as_json()
        changed.append(pinned)
        if len(changed) >= BATCH:
            _flush(PinnedState, StateAction, StateActionKey, changed, rows, keys)
            changed, rows, keys = [], [], []
    _flush(PinnedState, StateAction, StateActionKey, changed, rows, keys)


def _flush(
    PinnedState: Any, StateAction: Any, StateActionKey: Any, changed: list, rows: list, keys: list
) -> None:
    StateAction.objects.bulk_create(rows, batch_size=BATCH)
    StateActionKey.objects.bulk_create(keys, batch_size=BATCH)
    PinnedState.objects.bulk_update(changed, ["data", "action_count", "action_figures"], batch_size=BATCH)


def move_actions_back(apps: Any, schema_editor: Any) -> None:
    """The actions back into `data`; the state rows' served texts are then stale (reads build from items)."""
    PinnedState = apps.get_model("tickets", "PinnedState")
    StateAction = apps.get_model("tickets", "StateAction")
    for pinned in PinnedState.objects.order_by("pk").iterator(chunk_size=BATCH):
        actions = list(
            StateAction.objects.filter(state_id=pinned.pk).order_by("number").values_list("data", flat=True)
        )
        pinned.data = {**(pinned.data or {}), "actions_taken": actions}
        pinned.served_version = None
        pinned.save(update_fields=["data", "served_version"])


class Migration(migrations.Migration):
    dependencies = [
        ("tickets", "0023_h45_fill_served_texts"),
    ]

    operations = [
        migrations.AddField(
            model_name="pinnedstate",
            name="action_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="pinnedstate",
            name="action_figures",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.CreateModel(
            name="StateAction",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveIntegerField()),
                (
                    "data",
                    models.JSONField(
                        help_text="The action as stored (core.state.ActionItem, stored-only fields too)."
                    ),
                ),
                ("served", models.TextField(editable=False)),
                ("served_model", models.TextField(editable=False)),
                ("open_intent", models.BooleanField(default=False)),
                (
                    "state",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="action_rows",
                        to="tickets.pinnedstate",
                    ),
                ),
            ],
            options={
                "ordering": ["state", "number"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("open_intent", True)), fields=["state"], name="state_action_open"
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("state", "number"), name="state_action_number_unique"),
                    models.CheckConstraint(
                        condition=models.Q(("number__gte", 1)), name="state_action_number_positive"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="StateActionKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveIntegerField()),
                ("key", models.CharField(max_length=32)),
                (
                    "state",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tickets.pinnedstate",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["state", "key"], name="state_action_key")],
            },
        ),
        migrations.RunPython(move_actions_to_rows, move_actions_back, elidable=True),
    ]
