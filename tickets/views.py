from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from compaction.models import CompactionEvent
from tickets.models import Ticket


@require_GET
@login_required
def queue(request: HttpRequest) -> HttpResponse:
    tickets = Ticket.objects.select_related("ticket_class").order_by("-updated_at")[:100]
    return render(request, "tickets/queue.html", {"tickets": tickets})


@require_GET
@login_required
def ticket_detail(request: HttpRequest, ticket_id: str) -> HttpResponse:
    ticket = get_object_or_404(Ticket.objects.select_related("ticket_class", "pinned_state"), ticket_id=ticket_id)
    return render(request, "tickets/detail.html", {"ticket": ticket})


@require_GET
@login_required
def compaction_review(request: HttpRequest, ticket_id: str, number: int) -> HttpResponse:
    event = get_object_or_404(CompactionEvent.objects.select_related("ticket"), ticket__ticket_id=ticket_id, number=number)
    return render(request, "tickets/detail.html", {"ticket": event.ticket})
