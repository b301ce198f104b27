"""The served texts (0022) filled for the states already there, so that every ticket's state and context are
read from them from the first request after the upgrade. A state whose items no longer validate is left
without them: its reads build it from its items as before."""

from typing import Any

from django.db import migrations

from core.identity import ToolCatalog
from core.state import StateItems, agent_state
from core.state_text import list_texts, tail_text

COLUMNS = {
    "actions_taken": "served_actions",
    "customer_constraints": "served_constraints",
    "open_questions": "served_questions",
    "decisions": "served_decisions",
    "model_actions": "served_model_actions",
}
FIELDS = ["served_version", *COLUMNS.values(), "served_tail"]


def fill_served_texts(apps: Any, schema_editor: Any) -> None:
    PinnedState = apps.get_model("tickets", "PinnedState")
    catalogs: dict[int, ToolCatalog] = {}
    batch = []
    states = PinnedState.objects.select_related("ticket__ticket_class").filter(served_version__isnull=True)
    for pinned in states.order_by("pk").iterator(chunk_size=500):
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
        document = agent_state(
            ticket=ticket.ticket_id,
            order=ticket.order_id,
            seller_type=ticket.seller_type,
            version=pinned.version,
            items=items,
        )
        for name, text in list_texts(document).items():
            setattr(pinned, COLUMNS[name], text)
        pinned.served_tail = tail_text(document)
        pinned.served_version = pinned.version
        batch.append(pinned)
        if len(batch) >= 500:
            PinnedState.objects.bulk_update(batch, FIELDS)
            batch = []
    if batch:
        PinnedState.objects.bulk_update(batch, FIELDS)


class Migration(migrations.Migration):
    dependencies = [("tickets", "0022_h43_served_texts")]

    operations = [migrations.RunPython(fill_served_texts, migrations.RunPython.noop, elidable=True)]
