"""The agents' REST API. Each handler: check the headers, validate the body, call one service or selector,
answer with an output serializer. Rules live in the services; errors are mapped in exceptions.py.

One module although over 400 lines: each endpoint's OpenAPI declaration sits on its handler, and the base
view's checks (the token's class scope) apply to them all; split, a handler would be read apart from its
documented headers and errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import APIException
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import InvalidInput
from core.vocabulary import ActorKind
from desk.api import fast_reads, headers, schema, selectors, serializers
from desk.api.authentication import HashedTokenAuthentication
from desk.api.exceptions import desk_exception_handler
from desk.api.parsers import BoundedJSONParser
from desk.api.permissions import AgentWritesStaffReads
from desk.history import handoff_entry
from desk.turns import receive_turn
from tickets.models import AgentToken
from tickets.services.actions import record_action, settle_action
from tickets.services.actors import Actor
from tickets.services.handoffs import record_handoff
from tickets.services.lifecycle import open_ticket, set_ticket_status
from tickets.services.state_changes import change_state, change_state_once


class DeskAPIView(APIView):
    """Token auth for agents, session auth for people in a browser; JSON in, JSON out, JSON errors."""

    authentication_classes = [HashedTokenAuthentication, SessionAuthentication]
    permission_classes = [AgentWritesStaffReads]
    parser_classes = [BoundedJSONParser]
    renderer_classes = [JSONRenderer]

    def get_exception_handler(self) -> Any:
        return desk_exception_handler

    # A view's GET answered without DRF when it can (desk.api.fast_reads): (request, ticket_id, Allow) -> the
    # response, or None to take DRF's whole way.
    fast_get: Callable[[HttpRequest, str, str], HttpResponseBase | None] | None = None

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if self.fast_get is not None and request.method == "GET":
            self.headers = self.default_response_headers
            answer = self.fast_get(request, kwargs["ticket_id"], self.headers["Allow"])
            if answer is not None:
                return answer
        return super().dispatch(request, *args, **kwargs)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """After authentication and permissions: a token scoped to ticket classes reaches only their tickets
        (403 class_not_allowed for any other; an unknown ticket stays the view's 404)."""
        super().initial(request, *args, **kwargs)
        ticket_id = kwargs.get("ticket_id")
        if ticket_id is not None and isinstance(request.auth, AgentToken):
            selectors.check_ticket_scope(request.auth, ticket_id)


def _agent(request: Request) -> Actor:
    return Actor(kind=ActorKind.AGENT, user=request.user)  # type: ignore[arg-type]


def _key_scope(request: Request) -> str:
    """Whose Idempotency-Keys these are, beside the ticket's: the token's (a person's session: the user's)."""
    if isinstance(request.auth, AgentToken):
        return f"token-{request.auth.pk}"
    return f"user-{request.user.pk}"


def _validated(serializer_class: type[serializers.StrictSerializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class TicketListView(DeskAPIView):
    """Open a ticket of a class: the pinned state starts empty at version 1."""

    @extend_schema(
        operation_id="open_ticket",
        summary="Open a ticket",
        request=serializers.TicketIn,
        responses={201: serializers.TicketOut, **schema.errors(400, 401, 403, 409, 413)},
        examples=[schema.OPEN_TICKET_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        data = _validated(serializers.TicketIn, request)
        if isinstance(request.auth, AgentToken):
            selectors.check_class_scope(request.auth, data["ticket_class"])
        ticket = open_ticket(by=_agent(request), **data)
        detail = selectors.ticket_detail(ticket.ticket_id)
        location = reverse("api-ticket", kwargs={"ticket_id": ticket.ticket_id})
        return Response(
            serializers.TicketOut(detail.as_json()).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": location},
        )


class TicketDetailView(DeskAPIView):
    """The ticket, its state version, and the token figures of the request an agent would send now."""

    @extend_schema(
        operation_id="get_ticket",
        summary="A ticket with its token figures",
        responses={200: serializers.TicketOut, **schema.errors(401, 403, 404)},
    )
    def get(self, request: Request, ticket_id: str) -> Response:
        detail = selectors.ticket_detail(ticket_id)
        return Response(serializers.TicketOut(detail.as_json()).data)

    @extend_schema(
        operation_id="set_ticket_status",
        summary="Move the ticket to open, waiting, resolved or escalated",
        request=serializers.TicketStatusIn,
        responses={200: serializers.TicketOut, **schema.errors(400, 401, 403, 404, 413)},
    )
    def patch(self, request: Request, ticket_id: str) -> Response:
        ticket = selectors.ticket_by_id(ticket_id)
        data = _validated(serializers.TicketStatusIn, request)
        set_ticket_status(ticket=ticket, by=_agent(request), **data)
        return Response(serializers.TicketOut(selectors.ticket_detail(ticket_id).as_json()).data)


class TurnListView(DeskAPIView):
    """Append the next turn. Compaction is due on tokens and fires only at a boundary; the answer says what it did."""

    @extend_schema(
        operation_id="append_turn",
        summary="Append one turn; the compaction policy runs on it",
        request=serializers.TurnIn,
        responses={201: serializers.TurnAppendedOut, **schema.errors(400, 401, 403, 404, 413)},
        examples=schema.TURN_EXAMPLES,
    )
    def post(self, request: Request, ticket_id: str) -> Response:
        ticket = selectors.ticket_by_id(ticket_id)
        key = headers.optional_idempotency_key(request.headers.get("Idempotency-Key"))
        data = _validated(serializers.TurnIn, request)
        received = receive_turn(
            ticket=ticket, idempotency_key=key, by=_agent(request), refuse_in_flight=True, **data
        )
        # Built once, in the documented shape (TurnAppendedOut): no serializer walks it again.
        response = Response(received.as_json(), status=status.HTTP_201_CREATED)
        if received.replayed:
            response["Idempotent-Replayed"] = "true"
        return response


IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    location=OpenApiParameter.HEADER,
    required=False,
    description='The ETag you hold (e.g. "3"): answered 304 with no body while the state is still at it.',
)
IF_MATCH = OpenApiParameter(
    "If-Match",
    location=OpenApiParameter.HEADER,
    required=True,
    description='The ETag (version) of the state you read, e.g. "3". Missing: 428. Stale: 412.',
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=True,
    description=(
        "Unique per action, reused on every retry of it: 1-255 visible ASCII characters. The same key with "
        "the same body answers the first response again (with Idempotent-Replayed: true); with another body, 422."
    ),
)
ETAG_HEADER = OpenApiParameter(
    "ETag", location=OpenApiParameter.HEADER, response=True, description='The state version, e.g. "3".'
)


class StateView(DeskAPIView):
    """The pinned state: read it (ETag = version), change it with If-Match."""

    # An agent's plain GET is answered from the stored texts, past DRF (desk.api.fast_reads).
    fast_get = staticmethod(fast_reads.state)

    @extend_schema(
        operation_id="get_state",
        summary="The pinned state (ETag = version)",
        parameters=[IF_NONE_MATCH, ETAG_HEADER],
        responses={
            200: serializers.PinnedStateOut,
            304: OpenApiResponse(
                description="Not modified: the state is still at the version in If-None-Match."
            ),
            **schema.errors(401, 403, 404),
        },
    )
    def get(self, request: Request, ticket_id: str) -> Response:
        pinned = selectors.pinned_state_by_ticket_id(ticket_id)
        tag = {"ETag": headers.etag(pinned.version)}
        if headers.if_none_match_matches(request.headers.get("If-None-Match"), pinned.version):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers=tag)
        # Built once, in the documented shape (PinnedStateOut): the state stored with this version, as the service
        # that made it wrote it (no validation), or, for a state with none stored, built from its items.
        return Response(pinned.agent_json(), headers=tag)

    @extend_schema(
        operation_id="change_state",
        summary="Record a constraint, a question opened or resolved, or a decision",
        parameters=[
            IF_MATCH,
            ETAG_HEADER,
            OpenApiParameter(
                "Idempotency-Key",
                location=OpenApiParameter.HEADER,
                required=False,
                description=(
                    "Optional; per ticket and token. A retry with the same key and body answers the first response "
                    "again (status and body, with Idempotent-Replayed: true), even after the version moved; with "
                    "another body, 422; while the first is still processed, 409."
                ),
            ),
            OpenApiParameter(
                "Idempotent-Replayed",
                location=OpenApiParameter.HEADER,
                response=[200],
                description="true when this is the stored answer to an earlier request with the same key.",
            ),
        ],
        request=serializers.StateChangeIn,
        responses={
            200: serializers.PinnedStateOut,
            **schema.errors(400, 401, 403, 404, 409, 412, 413, 422, 428),
        },
        examples=schema.STATE_EXAMPLES,
    )
    def post(self, request: Request, ticket_id: str) -> Response:
        ticket = selectors.ticket_by_id(ticket_id)
        expected_version = headers.if_match_version(request.headers.get("If-Match"))
        key = headers.optional_idempotency_key(request.headers.get("Idempotency-Key"))
        data = _validated(serializers.StateChangeIn, request)
        if not key:
            pinned = change_state(
                ticket=ticket, expected_version=expected_version, by=_agent(request), **data
            )
            return Response(pinned.agent_json(), headers={"ETag": headers.etag(pinned.version)})
        changed = change_state_once(
            ticket=ticket,
            idempotency_key=key,
            key_scope=_key_scope(request),
            expected_version=expected_version,
            by=_agent(request),
            refuse_in_flight=True,
            **data,
        )
        response = Response(
            changed.body, status=changed.status, headers={"ETag": headers.etag(changed.body["version"])}
        )
        if changed.replayed:
            response["Idempotent-Replayed"] = "true"
        return response


class ActionListView(DeskAPIView):
    """Reserve an action before its tool runs, or record one that succeeded, with an Idempotency-Key.

    A second irreversible action with the same tool and item (however spelled) as one that still holds the
    item is refused (409, naming it) unless marked as a deliberate repeat with a reason; the refusal is kept.
    """

    @extend_schema(
        operation_id="record_action",
        summary='Reserve an action before its tool runs ("status": "intended"), or record one that succeeded',
        parameters=[
            IDEMPOTENCY_KEY,
            OpenApiParameter(
                "Idempotent-Replayed",
                location=OpenApiParameter.HEADER,
                response=[201],
                description="true when this is the stored answer to an earlier request with the same key.",
            ),
        ],
        request=serializers.ActionIn,
        responses={201: serializers.ActionRecordedOut, **schema.errors(400, 401, 403, 404, 409, 413, 422)},
        examples=schema.ACTION_EXAMPLES,
    )
    def post(self, request: Request, ticket_id: str) -> Response:
        # The action reads the ticket with its locked state (one round trip fewer). It is looked up here only
        # to keep the answers' order: an unknown ticket is 404 before a bad header or body is 400.
        selectors.check_ticket_id(ticket_id)  # an id no ticket can have: 404 without asking the database
        try:
            key = headers.idempotency_key(request.headers.get("Idempotency-Key"))
            data = _validated(serializers.ActionIn, request)
            recorded = record_action(
                ticket=ticket_id, idempotency_key=key, by=_agent(request), refuse_in_flight=True, **data
            )
        except (APIException, InvalidInput):
            selectors.ticket_by_id(ticket_id)
            raise
        # record_action stores only what it recorded, and stores it as 201: a replay answers the same. The body
        # is built once, in the documented shape (ActionRecordedOut).
        response = Response(recorded.body, status=status.HTTP_201_CREATED)
        if recorded.replayed:
            response["Idempotent-Replayed"] = "true"
        return response


class HandoffListView(DeskAPIView):
    """Record a handoff between agents on the ticket (a history entry beside its compactions)."""

    @extend_schema(
        operation_id="record_handoff",
        summary="Record a handoff between agents: from, to, and what the receiving agent was given",
        request=serializers.HandoffIn,
        responses={201: serializers.HistoryEntryOut, **schema.errors(400, 401, 403, 404, 413)},
    )
    def post(self, request: Request, ticket_id: str) -> Response:
        ticket = selectors.ticket_by_id(ticket_id)
        data = _validated(serializers.HandoffIn, request)
        handoff = record_handoff(
            ticket=ticket,
            from_agent=data["from_agent"],
            to_agent=data["to_agent"],
            given=data["given"] or {},
            by=_agent(request),
        )
        return Response(
            serializers.HistoryEntryOut(handoff_entry(handoff)).data, status=status.HTTP_201_CREATED
        )


class ActionDetailView(DeskAPIView):
    """Settle an intent once its tool has run."""

    @extend_schema(
        operation_id="settle_action",
        summary="Settle an intended action: succeeded, or failed with a reason (a failed intent frees its item)",
        request=serializers.ActionSettleIn,
        responses={
            200: serializers.ActionRecordedOut,
            404: OpenApiResponse(
                serializers.ErrorOut, description="No such ticket, or no such action on it."
            ),
            409: OpenApiResponse(
                serializers.ErrorOut,
                description="The action is already settled the other way (the body shows it).",
            ),
            **schema.errors(400, 401, 403, 413),
        },
        examples=schema.SETTLE_EXAMPLES,
    )
    def patch(self, request: Request, ticket_id: str, action_id: str) -> Response:
        # The settle reads the ticket with its locked state (one round trip fewer). It is looked up here only
        # to keep the answers' order: an unknown ticket is 404 before a malformed body or settle is 400.
        selectors.check_ticket_id(ticket_id)  # an id no ticket can have: 404 without asking the database
        try:
            data = _validated(serializers.ActionSettleIn, request)
            settled = settle_action(ticket=ticket_id, action_id=action_id, by=_agent(request), **data)
        except (APIException, InvalidInput):
            selectors.ticket_by_id(ticket_id)
            raise
        # Built once, in the documented shape (ActionRecordedOut), as the action POST's: no serializer walks it.
        return Response(settled.body)


class HistoryView(DeskAPIView):
    """Every change to the ticket, newest first, with who and when."""

    @extend_schema(
        operation_id="ticket_history",
        summary="The ticket's history, newest first, paginated",
        description=(
            "Turns posted, state changes, actions (intended, recorded, settled, reversed), refused attempts "
            "(what was asked and which earlier action refused it), status changes, supervisor corrections and "
            "compactions. Pages are numbered from 1 (`?page=`); `next` names the next, older page. New "
            "entries arrive on page 1, so a reader paging back through a live ticket may see an entry twice."
        ),
        parameters=[
            OpenApiParameter("page", int, description="Page number, from 1 (the newest entries)."),
            OpenApiParameter("page_size", int, description="Entries per page: 1 to 200, default 50."),
        ],
        responses={200: serializers.HistoryPageOut, **schema.errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, ticket_id: str) -> Response:
        page_number = headers.positive_int_param(request.query_params.get("page"), "page", default=1)
        page_size = headers.positive_int_param(
            request.query_params.get("page_size"),
            "page_size",
            default=selectors.HISTORY_PAGE_SIZE,
            maximum=selectors.HISTORY_MAX_PAGE_SIZE,
        )
        page = selectors.ticket_history(ticket_id, page=page_number, page_size=page_size)

        def link(number: int) -> str:
            query = request.query_params.copy()
            query["page"] = str(number)
            return f"{request.path}?{query.urlencode()}"

        body = {
            "count": page.count,
            "page": page.page,
            "page_size": page.page_size,
            "next": link(page.page + 1) if page.has_next else None,
            "previous": link(page.page - 1) if page.page > 1 else None,
            "results": page.entries,
        }
        return Response(serializers.HistoryPageOut(body).data)


class ContextView(DeskAPIView):
    """System prompt, pinned state, active summary and the turns since: what to send the model next."""

    # An agent's plain GET is answered from the stored texts, past DRF (desk.api.fast_reads).
    fast_get = staticmethod(fast_reads.context)

    @extend_schema(
        operation_id="get_context",
        summary="The assembled request to send to the model",
        responses={200: serializers.ContextOut, **schema.errors(401, 403, 404)},
    )
    def get(self, request: Request, ticket_id: str) -> Response:
        # Built once, in the documented shape (ContextOut): no serializer re-walks the turns.
        return Response(selectors.ticket_context(ticket_id).as_json())


class CompactionListView(DeskAPIView):
    """Every compaction event: applied, deferred or failed, with tokens, cost, latency and coverage."""

    @extend_schema(
        operation_id="list_compactions",
        summary="The ticket's compaction events",
        responses={200: serializers.CompactionOut(many=True), **schema.errors(401, 403, 404)},
    )
    def get(self, request: Request, ticket_id: str) -> Response:
        events = selectors.ticket_compactions(ticket_id)
        return Response(serializers.CompactionOut(events, many=True).data)


@csrf_exempt
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any other address under /api/ gets a JSON 404 too, whatever the method: not an HTML page, not a CSRF
    refusal (there is no session to protect on an address that does nothing)."""
    return JsonResponse(
        {"error": "not_found", "message": f"no API endpoint at {request.path}; see /api/v1/docs/"}, status=404
    )
