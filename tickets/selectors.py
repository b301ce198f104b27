"""Domain reads other layers share (the metrics page, the queue)."""

from __future__ import annotations

from datetime import datetime

from tickets.models import RefusedAttempt


def refused_attempts_count(since: datetime | None = None, *, until: datetime | None = None) -> int:
    """How many repeats of irreversible actions the desk refused (since a moment, or ever; before `until`,
    exclusive, when given): one query."""
    attempts = RefusedAttempt.objects.since(since)
    return (attempts if until is None else attempts.filter(created_at__lt=until)).count()
