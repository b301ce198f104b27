"""The supervisors' pages. Thin views: a role check, one access-checked fetch, a form, a selector or
one service call, render. Each htmx-driven view serves both its page and its fragment."""

from __future__ import annotations

import csv
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotModified,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import push_url, trigger_client_event

from compaction.costs import ticket_savings
from compaction.reviews import compaction_review_record
from core.errors import InvalidInput
from core.vocabulary import ActorKind
from desk.pages import ledger as ledger_reads
from desk.pages import metrics as metrics_reads
from desk.pages import queue as queue_reads
from desk.pages import replay as replay_reads
from desk.pages import review as review_reads
from desk.pages import ticket as ticket_reads
from desk.pages.forms import (
    CorrectionForm,
    LiveMarksForm,
    MetricsRangeForm,
    QueueFilterForm,
    QueuePositionForm,
    ReplayForm,
    ReviewForm,
    StatusForm,
    TicketWindowForm,
    correction_panels,
    correction_targets,
)
from desk.pages.labels import CATEGORIES
from desk.pages.ticket import live as live_reads
from tickets.accounts import roles_of
from tickets.errors import StaleVersion
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
    query = request.GET.copy()
    if "page" in query:
        # A numbered page from before keyset pages (an old bookmark): the first page, filters kept.
        query.pop("page")
        return redirect(f"{reverse('queue')}?{query.urlencode()}" if query else reverse("queue"))
    classes = list(queue_reads.ticket_classes().values_list("slug", flat=True))
    form = QueueFilterForm(request.GET, class_slugs=classes)
    filters = form.filters()
    position = QueuePositionForm(request.GET).position(filters.sort)
    count = queue_reads.queue_count(filters, cap=queue_reads.QUEUE_COUNT_CAP)
    page = queue_reads.queue_page(filters, position, size=queue_reads.QUEUE_PAGE_SIZE)
    rows = [(t, queue_reads.refunded_cents(t)) for t in page.tickets]
    for name in QueuePositionForm.base_fields:
        query.pop(name, None)
    template_name = "tickets/queue.html"
    if _is_fragment_request(request):
        template_name += "#results"
    response = render(
        request,
        template_name,
        {"form": form, "page": page, "count": count, "rows": rows, "query": query.urlencode()},
    )
    if _is_fragment_request(request):
        push_url(response, request.get_full_path())
    return response


# The parts of the ticket page an htmx request may ask for, by the id of the element it swaps.
TICKET_FRAGMENTS = ("timeline", "audit-trail", "status-trail")


@require_GET
@desk_role()
@vary_on_headers("HX-Request", "HX-Target")
def ticket_detail(request: HttpRequest, ticket_id: str) -> HttpResponse:
    """The ticket page at a window of its turns; an htmx request for the timeline, the audit trail or the
    status changes (its `HX-Target`) gets that part alone, and the address it shows is pushed."""
    ticket = ticket_reads.get_ticket(ticket_id)
    form = TicketWindowForm(request.GET)
    if not form.is_valid():
        return HttpResponse(form.error_text(), status=400, content_type="text/plain")
    target = request.htmx.target if _is_fragment_request(request) else None  # type: ignore[attr-defined]
    if target == "card-savings":
        # A long ticket's page asks for what its compactions saved on its own (ticket_page reads it inline
        # for a shorter one): one aggregate query over its compactions and working turns.
        return render(
            request,
            "tickets/detail.html#card-savings",
            {"ticket": ticket, "saved": ticket_savings(ticket)},
        )
    page = ticket_reads.ticket_page(ticket, **form.window_arguments())
    template_name = "tickets/detail.html"
    fragment = target if target in TICKET_FRAGMENTS else None
    if fragment:
        template_name += f"#{fragment}"
    response = render(
        request,
        template_name,
        {
            "ticket": ticket,
            "page": page,
            "state": page.state,
            "audit": page.audit,
            "panels": correction_panels(page.state),
            "ledger": ledger_reads.ledger_panel(ticket),
        },
    )
    if fragment:
        push_url(response, request.get_full_path())
    return response


@require_GET
@desk_role()
def ticket_live(request: HttpRequest, ticket_id: str) -> HttpResponse:
    """What is new on the ticket since its page was opened (`?turn=&compaction=&refused=`, the marks the
    page was drawn with): the page polls it with htmx. Conditional: the ETag changes only when something
    new arrives, so a poll with a matching If-None-Match is a 304 with no body and no reads beyond the
    ticket and two aggregates."""
    ticket = ticket_reads.get_ticket(ticket_id)
    form = LiveMarksForm(request.GET)
    if not form.is_valid():
        return HttpResponse(form.error_text(), status=400, content_type="text/plain")
    opened = live_reads.Marks(**form.cleaned_marks())
    now = live_reads.marks_now(ticket)
    etag = live_reads.live_etag(now, opened, ticket.status)
    if etag in {tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")}:
        response: HttpResponse = HttpResponseNotModified()
    else:
        news = live_reads.live_news(ticket, opened, now)
        response = render(request, "tickets/detail.html#live-news", {"ticket": ticket, "news": news})
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"
    return response


@require_GET
@desk_role()
def ticket_export(request: HttpRequest, ticket_id: str) -> HttpResponse:
    """The ticket as one JSON document (state, turns, compactions with reviews, state changes)."""
    ticket = ticket_reads.get_ticket(ticket_id)
    # Streamed: the turns are read and written in batches, however many there are.
    document = ticket_reads.ticket_export(ticket)
    response = StreamingHttpResponse(ticket_reads.export_chunks(document), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{ticket.ticket_id}.json"'
    return response  # type: ignore[return-value]  # desk_role's type names HttpResponse; any response passes


@require_POST
@desk_role()
@vary_on_headers("HX-Request")
def correct_state(request: HttpRequest, ticket_id: str) -> HttpResponse:
    """A supervisor's correction of the pinned state, posted from the inline forms on the ticket page."""
    ticket = ticket_reads.get_ticket(ticket_id)
    current = ticket.pinned_state.agent_json()
    form = CorrectionForm(request.POST, targets=correction_targets(current))
    status = 200
    stale: dict[str, Any] | None = None
    saved = False
    if form.is_valid():
        try:
            version = correct_pinned_state(
                ticket=ticket,
                by=Actor(kind=ActorKind.SUPERVISOR, user=request.user),  # type: ignore[arg-type]
                **form.service_arguments(),
            ).version
            saved = True
        except StaleVersion as exc:
            status = 409
            stale = {
                "yours": form.cleaned_data["expected_version"],
                "current": exc.detail["current_version"],
                "message": exc.message,
                "state": exc.detail["current_state"],
                "changes": ticket_reads.changes_since(ticket, form.cleaned_data["expected_version"]),
            }
        except InvalidInput as exc:
            status = 422
            field = exc.detail.get("field")
            form.add_error(field if field in form.fields else None, exc.message)
    else:
        status = 422

    if saved and not _is_fragment_request(request):
        messages.success(request, f"Correction saved: the state is now at version {version}.")
        return redirect(reverse("ticket-detail", kwargs={"ticket_id": ticket.ticket_id}) + "#state")

    panel = ticket_reads.state_panel(ticket)
    state = panel.state
    if stale is not None:
        # Keep what the supervisor typed, now against the version they have just been shown.
        data = request.POST.copy()
        data["expected_version"] = str(state["version"])
        form = CorrectionForm(data, targets=correction_targets(state))
    context = {
        "ticket": panel.ticket,
        "state": state,
        "audit": panel.audit,
        "page": panel,  # the audit trail's pager reads page.audit_older_than
        "panels": correction_panels(state, bound=None if saved else form),
        "stale": stale,
        "saved": saved,
    }
    if _is_fragment_request(request):
        # The panel, and out of band every header card a correction can change.
        response = render(request, "tickets/_correction_response.html", context, status=status)
        if saved:
            trigger_client_event(response, "stateCorrected", {"version": state["version"]})
        return response
    page = ticket_reads.ticket_page(panel.ticket)
    return render(request, "tickets/detail.html", {**context, "page": page}, status=status)


@require_POST
@desk_role()
def set_status(request: HttpRequest, ticket_id: str) -> HttpResponse:
    """Escalate, park, resolve or reopen a ticket from its page, with a reason; a bad status or no reason
    is a 400 and nothing changed."""
    ticket = ticket_reads.get_ticket(ticket_id)
    form = StatusForm(request.POST)
    if not form.is_valid():
        return HttpResponse(form.error_text(), status=400, content_type="text/plain")
    set_ticket_status(
        ticket=ticket,
        status=form.cleaned_data["status"],
        by=Actor(kind=ActorKind.SUPERVISOR, user=request.user),  # type: ignore[arg-type]
        reason=form.cleaned_data["reason"],
    )
    return redirect(ticket.get_absolute_url())


def _render_review(
    request: HttpRequest, ticket: Any, number: int, form: ReviewForm, *, status: int = 200
) -> HttpResponse:
    review = review_reads.review_page(ticket, number)
    return render(
        request,
        "tickets/review.html",
        {"ticket": ticket, "review": review, "event": review.event, "categories": CATEGORIES, "form": form},
        status=status,
    )


@require_GET
@desk_role()
def compaction_review(request: HttpRequest, ticket_id: str, number: int) -> HttpResponse:
    ticket = ticket_reads.get_ticket(ticket_id)
    return _render_review(request, ticket, number, ReviewForm())


@require_POST
@desk_role()
def review_compaction(request: HttpRequest, ticket_id: str, number: int) -> HttpResponse:
    """Record a verdict on a compaction, then go on to the next one waiting for review."""
    ticket = ticket_reads.get_ticket(ticket_id)
    event = review_reads.get_event(ticket, number)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        return _render_review(request, ticket, number, form, status=422)
    try:
        review = compaction_review_record(
            event=event,
            by=request.user,  # type: ignore[arg-type]
            verdict=form.cleaned_data["verdict"],
            comment=form.cleaned_data["comment"],
        )
    except InvalidInput as exc:
        field = exc.detail.get("field")
        form.add_error(field if field in form.fields else None, exc.message)
        return _render_review(request, ticket, number, form, status=422)
    messages.success(
        request, f"{ticket.ticket_id} compaction #{number} marked {review.get_verdict_display().lower()}."
    )
    following = review_reads.next_unreviewed(event)
    return redirect(following.get_absolute_url() if following else event.get_absolute_url())


@require_GET
@desk_role()
def next_review(request: HttpRequest) -> HttpResponse:
    """The oldest compaction waiting for review, or the queue filtered to them when none is left."""
    following = review_reads.next_unreviewed()
    if following is None:
        messages.info(request, "No compaction is waiting for review.")
        return redirect(reverse("queue"))
    return redirect(following.get_absolute_url())


@require_GET
@desk_role()
@vary_on_headers("HX-Request")
def replay(request: HttpRequest, ticket_id: str) -> HttpResponse:
    ticket = ticket_reads.get_ticket(ticket_id)
    data = request.GET if "turn" in request.GET else {"turn": ticket.turn_count or 1}
    form = ReplayForm(data, turn_count=max(ticket.turn_count, 1))
    result = (
        replay_reads.replay(ticket, form.cleaned_data["turn"])
        if form.is_valid() and ticket.turn_count
        else None
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
    form = MetricsRangeForm(request.GET or None)
    span = form.date_range()
    rows = metrics_reads.daily_metrics(span)
    return render(
        request,
        "tickets/metrics.html",
        {
            "form": form,
            "span": span,
            "rows": metrics_reads.compaction_metrics(span),
            "series": metrics_reads.daily_series(rows, span),
            "refused_attempts": metrics_reads.refused_attempts_in(span),
            "ledger": ledger_reads.ledger_metrics(),
            "query": request.GET.urlencode(),
        },
        status=400 if form.is_bound and not form.is_valid() else 200,
    )


@require_GET
@desk_role()
def metrics_csv(request: HttpRequest) -> HttpResponse:
    """Per class and day over the chosen range, as CSV."""
    form = MetricsRangeForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        return HttpResponse(
            " ".join(str(e) for e in form.non_field_errors()) or "Bad date range.",
            status=400,
            content_type="text/plain",
        )
    span = form.date_range()
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="compaction-metrics-{span.start}-{span.end}.csv"'
    csv.writer(response).writerows(metrics_reads.metrics_csv_rows(metrics_reads.daily_metrics(span)))
    return response


@require_GET
@desk_role(admin=True)
def classes(request: HttpRequest) -> HttpResponse:
    return render(request, "tickets/classes.html", {"classes": metrics_reads.class_table()})
