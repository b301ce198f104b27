"""The agent-facing state stored per version beside the items (PinnedState.agent_data), filled for the states
already there. A state whose items no longer validate is left without it: its reads build it as before."""

from typing import Any

from django.db import migrations, models

from core.identity import ToolCatalog
from core.state import StateItems, agent_state


def fill_agent_data(apps: Any, schema_editor: Any) -> None:
    PinnedState = apps.get_model("tickets", "PinnedState")
    catalogs: dict[int, ToolCatalog] = {}
    batch = []
    states = PinnedState.objects.select_related("ticket__ticket_class").order_by("pk")
    for pinned in states.iterator(chunk_size=500):
        ticket = pinned.ticket
        klass = ticket.ticket_class
        try:  # a bad catalog (CatalogError) or bad items (pydantic's ValidationError): both are ValueErrors
            if klass.pk not in catalogs:
                catalogs[klass.pk] = ToolCatalog.build(
                    irreversible=klass.irreversible_tools, money=klass.money_tools
                )
            items = StateItems.load(pinned.data or {}, tools=catalogs[klass.pk])
        except ValueError:
            continue
        pinned.agent_data = agent_state(
            ticket=ticket.ticket_id,
            order=ticket.order_id,
            seller_type=ticket.seller_type,
            version=pinned.version,
            items=items,
        )
        batch.append(pinned)
        if len(batch) >= 500:
            PinnedState.objects.bulk_update(batch, ["agent_data"])
            batch = []
    if batch:
        PinnedState.objects.bulk_update(batch, ["agent_data"])


class Migration(migrations.Migration):
    dependencies = [
        ("tickets", "0019_h30_agent_token_classes"),
    ]

    operations = [
        migrations.AddField(
            model_name="pinnedstate",
            name="agent_data",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="The agent-facing state at `version` (core.state.agent_state), written with `data` by "
                "the services that change it (edited in place, item by item): a read serves it as stored, with "
                "no validation. Trusted only while its own version is the row's; else the state is computed "
                "from `data`.",
                null=True,
            ),
        ),
        migrations.RunPython(fill_agent_data, migrations.RunPython.noop, elidable=True),
    ]
