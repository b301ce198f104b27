"""Domain reads other layers share (the metrics page, the queue)."""

from __future__ import annotations

from datetime import datetime

from tickets.models import RefusedAttempt


def refused_attempts_count(since: datetime | None = None) -> int:
    """How many repeats of irreversible actions the desk refused (since a moment, or ever): one query."""
    return RefusedAttempt.objects.since(since).count()
