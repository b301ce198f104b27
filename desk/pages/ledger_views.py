"""The supervisor's resolution of a ledger mismatch, posted from the ticket page's ledger panel."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import InvalidInput
from core.vocabulary import ActorKind
from desk.pages import ticket as ticket_reads
from desk.pages.ledger import LedgerResolutionForm
from desk.pages.views import desk_role
from ledger.services import resolve_ledger_mismatch
from tickets.services.actors import Actor


@require_POST
@desk_role()
def resolve_ledger(request: HttpRequest, ticket_id: str, outcome_id: int) -> HttpResponse:
    """Add the missed action, mark the action failed, or accept the mismatch with a reason; back to the panel."""
    ticket = ticket_reads.get_ticket(ticket_id)
    form = LedgerResolutionForm(request.POST)
    back = redirect(ticket.get_absolute_url() + "#ledger")
    if not form.is_valid():
        messages.error(request, f"Not resolved: {form.error_text()}")
        return back
    try:
        resolve_ledger_mismatch(
            ticket=ticket,
            reconciliation_id=outcome_id,
            by=Actor(kind=ActorKind.SUPERVISOR, user=request.user),  # type: ignore[arg-type]
            **form.cleaned_data,
        )
    except InvalidInput as exc:
        messages.error(request, f"Not resolved: {exc.message}")
        return back
    messages.success(request, "Ledger mismatch resolved.")
    return back
