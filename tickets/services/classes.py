"""Budget classes: created and changed by admins, every change audited."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F

from core.caps import CatalogCapsError
from core.errors import InvalidInput
from core.identity import CatalogError
from core.tokens import UnknownEncoding, get_encoding
from tickets.models import PinnedState, TicketClass, TicketClassChange

if TYPE_CHECKING:
    from django.contrib.auth.models import User


CLASS_AUDITED_FIELDS = (
    "slug",
    "token_budget",
    "compaction_threshold",
    "keep_recent_tokens",
    "min_gain_share",
    "summarizer_backend",
    "summarizer_model",
    "encoding",
    "system_prompt",
    "working_input_price",
    "working_output_price",
    "summarizer_input_price",
    "summarizer_output_price",
    "irreversible_tools",
    "money_tools",
    "money_caps",
    "require_belief",
    "intent_timeout_minutes",
)


def _class_settings(ticket_class: TicketClass) -> dict[str, Any]:
    settings = {}
    for name in CLASS_AUDITED_FIELDS:
        value = getattr(ticket_class, name)
        settings[name] = value if isinstance(value, str | int | float | list | dict) else str(value)
    return settings


@transaction.atomic
def save_ticket_class(*, ticket_class: TicketClass, by: User | None, reason: str = "") -> TicketClass:
    """Create or change a ticket class, audited with its settings before and after and the `reason`
    given for it.

    Stored token counts stay as they were computed (a turn is never tokenized again); a new budget or
    threshold applies from the next turn of each ticket.
    """
    try:
        get_encoding(ticket_class.encoding)
    except UnknownEncoding as exc:
        raise InvalidInput(str(exc), field="encoding") from None
    try:
        ticket_class.tool_catalog  # noqa: B018 - builds the catalog to check it
    except CatalogError as exc:
        raise InvalidInput(str(exc), field="tools") from None
    try:
        ticket_class.caps  # noqa: B018 - validates the caps
    except CatalogCapsError as exc:
        raise InvalidInput(str(exc), field="money_caps") from None
    before: dict[str, Any] = {}
    if ticket_class.pk is not None:
        before = _class_settings(TicketClass.objects.select_for_update().get(pk=ticket_class.pk))
    ticket_class.save()
    if before.get("intent_timeout_minutes") != ticket_class.intent_timeout_minutes:
        # Intents already open are judged by the new timeout too.
        ticket_class.tickets.filter(open_intent_since__isnull=False).update(
            intent_stale_at=F("open_intent_since") + ticket_class.intent_timeout
        )
    after = _class_settings(TicketClass.objects.get(pk=ticket_class.pk))  # as stored: 2 -> "2.0000"
    if before and any(before[k] != after[k] for k in ("irreversible_tools", "money_tools")):
        # The money totals of the agent-facing state follow the catalog: the stored copies are dropped (reads
        # build the state from its items until its next change stores it again).
        PinnedState.objects.filter(ticket__ticket_class=ticket_class).update(served_version=None)
    if before and any(before[k] != after[k] for k in ("token_budget", "compaction_threshold")):
        # A new threshold decides which tickets' state alone fills it (one pass over the class's tickets).
        ticket_class.tickets.all().refresh_state_over_threshold()
    if before != after:
        TicketClassChange.objects.create(
            ticket_class=ticket_class, actor=by, before=before, after=after, reason=reason.strip()
        )
    return ticket_class
