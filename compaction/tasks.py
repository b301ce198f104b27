from __future__ import annotations

from django.tasks import task

from compaction.services import run_compaction


@task()
def compact_ticket_task(*, event_pk: int) -> dict[str, object]:
    """Run a claimed compaction. Safe to run twice: the second run finds the event taken or finished."""
    event = run_compaction(event_pk=event_pk)
    return {"status": event.status, "number": event.number}
