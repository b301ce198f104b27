"""The supervisors' pages. Thin views: a role check, one access-checked fetch, a form, a selector or
one service call, render. Each htmx-driven view serves both its page and its fragment."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import push_url, trigger_client_event

from desk.pages import selectors
from desk.pages.forms import (
    CorrectionForm,
    QueueFilterForm,
    ReplayForm,
    StatusForm,
    correction_panels,
    correction_targets,
)
from tickets.accounts import roles_of
from tickets.errors import InvalidInput, StaleVersion
from tickets.models import ActorKind, Ticket, TicketStatus
from tickets.services.actors import Actor
from tickets.services.lifecycle import set_ticket_status
from tickets.services.state_changes import correct_state as correct_pinned_state

View = Callable[..., HttpResponse]


def _is_fragment_request(request: HttpRequest) -> bool:
    """An htmx request for a fragment (a history restore wants the whole page)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.history_restore_request  # type: ignore[union-attr]


def desk_role(*, admin: bool = False) -> Callable[[View], View]:
    """Supervisors (and admins) only; with `admin=True`, admins only.

    Anonymous users go to the login page; any other logged-in user (an agent's account, say) gets 403.
    """

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            roles = roles_of(request.user)
            if not roles.supervisor or (admin and not roles.admin):
                raise PermissionDenied(
                    "admins only" if admin and roles.supervisor else "the desk is for supervisors and admins"
                )
            request.desk_roles = roles  # type: ignore[attr-defined]
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


@require_GET
@desk_role()
@vary_on_headers("HX-Request")
def queue(request: HttpRequest) -> HttpResponse:
    classes = list(selectors.ticket_classes().values_list("slug", flat=True))
    form = QueueFilterForm(request.GET, class_slugs=classes)
    tickets = selectors.queue_tickets(form.filters())
    page = Paginator(tickets, selectors.QUEUE_PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [(t, selectors.refunded_cents(t)) for t in page.object_list]
    query = request.GET.copy()
    query.pop("page", None)
    template_name = "tickets/queue.html"
    if _is_fragment_request(request):
        template_name += "#results"
    response = render(
        request,
        template_name,
        {"form": form, "page": page, "rows": rows, "query": query.urlencode()},
    )
    if _is_fragment_request(request):
        push_url(response, request.get_full_path())
    return response


@require_GET
@desk_role()
@vary_on_headers("HX-Request")
def ticket_detail(request: HttpRequest, ticket_id: str) -> HttpResponse:
    ticket = selectors.get_ticket(ticket_id)
    page = selectors.ticket_page(ticket)
    return render(
        request,
        "tickets/detail.html",
        {
            "ticket": ticket,
            "page": page,
            "state": page.state,
            "changes": page.changes,
            "panels": correction_panels(page.state),
        },
    )


@require_POST
@desk_role()
@vary_on_headers("HX-Request")
def correct_state(request: HttpRequest, ticket_id: str) -> HttpResponse:
    """A supervisor's correction of the pinned state, posted from the inline forms on the ticket page."""
    ticket = selectors.get_ticket(ticket_id)
    current = ticket.pinned_state.agent_json()
    form = CorrectionForm(request.POST, targets=correction_targets(current))
    status = 200
    stale: dict[str, Any] | None = None
    saved = False
    if form.is_valid():
        try:
            correct_pinned_state(
                ticket=ticket,
                by=Actor(kind=ActorKind.SUPERVISOR, user=request.user),  # type: ignore[arg-type]
                **form.service_arguments(),
            )
            saved = True
        except StaleVersion as exc:
            status = 409
            stale = {
                "yours": form.cleaned_data["expected_version"],
                "current": exc.detail["current_version"],
                "message": exc.message,
                "state": exc.detail["current_state"],
                "changes": selectors.changes_since(ticket, form.cleaned_data["expected_version"]),
            }
        except InvalidInput as exc:
            status = 422
            field = exc.detail.get("field")
            form.add_error(field if field in form.fields else None, exc.message)
    else:
        status = 422

    if saved and not _is_fragment_request(request):
        return redirect(reverse("ticket-detail", kwargs={"ticket_id": ticket.ticket_id}) + "#state")

    state, changes = selectors.state_panel(ticket)
    if stale is not None:
        # Keep what the supervisor typed, now against the version they have just been shown.
        data = request.POST.copy()
        data["expected_version"] = str(state["version"])
        form = CorrectionForm(data, targets=correction_targets(state))
    panels = correction_panels(state, bound=None if saved else form)
    context = {
        "ticket": ticket,
        "state": state,
        "changes": changes,
        "panels": panels,
        "stale": stale,
        "saved": saved,
    }
    if _is_fragment_request(request):
        response = render(request, "tickets/detail.html#state-panel", context, status=status)
        if saved:
            trigger_client_event(response, "stateCorrected", {"version": state["version"]})
        return response
    page = selectors.ticket_page(
        Ticket.objects.select_related("ticket_class", "pinned_state").get(pk=ticket.pk)
    )
    return render(request, "tickets/detail.html", {**context, "page": page}, status=status)


@require_POST
@desk_role()
def set_status(request: HttpRequest, ticket_id: str) -> HttpResponse:
    """Escalate, park, resolve or reopen a ticket from its page; a bad status is a 400, nothing changed."""
    ticket = selectors.get_ticket(ticket_id)
    form = StatusForm(request.POST)
    if not form.is_valid():
        return HttpResponse(
            f"Unknown status: choose one of {', '.join(TicketStatus.values)}.",
            status=400,
            content_type="text/plain",
        )
    set_ticket_status(
        ticket=ticket,
        status=form.cleaned_data["status"],
        by=Actor(kind=ActorKind.SUPERVISOR, user=request.user),  # type: ignore[arg-type]
    )
    return redirect(ticket.get_absolute_url())


@require_GET
@desk_role()
def compaction_review(request: HttpRequest, ticket_id: str, number: int) -> HttpResponse:
    ticket = selectors.get_ticket(ticket_id)
    review = selectors.compaction_review(ticket, number)
    return render(
        request,
        "tickets/review.html",
        {"ticket": ticket, "review": review, "event": review.event, "categories": selectors.CATEGORIES},
    )


@require_GET
@desk_role()
@vary_on_headers("HX-Request")
def replay(request: HttpRequest, ticket_id: str) -> HttpResponse:
    ticket = selectors.get_ticket(ticket_id)
    data = request.GET if "turn" in request.GET else {"turn": ticket.turn_count or 1}
    form = ReplayForm(data, turn_count=max(ticket.turn_count, 1))
    result = (
        selectors.replay(ticket, form.cleaned_data["turn"]) if form.is_valid() and ticket.turn_count else None
    )
    template_name = "tickets/replay.html"
    if _is_fragment_request(request):
        template_name += "#replay-context"
    response = render(
        request,
        template_name,
        {"ticket": ticket, "form": form, "replay": result, "turns": range(1, ticket.turn_count + 1)},
        status=200 if form.is_valid() or not ticket.turn_count else 400,
    )
    if _is_fragment_request(request):
        push_url(response, request.get_full_path())
    return response


@require_GET
@desk_role()
def metrics(request: HttpRequest) -> HttpResponse:
    return render(request, "tickets/metrics.html", {"rows": selectors.compaction_metrics()})


@require_GET
@desk_role(admin=True)
def classes(request: HttpRequest) -> HttpResponse:
    return render(request, "tickets/classes.html", {"classes": selectors.class_table()})
