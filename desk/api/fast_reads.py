"""The agent's two reads on every turn, answered without DRF's request and response machinery.

A state GET or a context GET by an agent token answers with text the database joined from the stored state
(core.state_text): nothing is parsed, validated or rendered again. Only the plain case is answered here: an
`Authorization: Token` header the API's token authentication accepts, a role that may read, a known ticket
its token may reach, a state with texts of its version. Anything else (no header, a session, a bad or
revoked token, an unknown ticket, another class, no texts stored) returns None and goes the whole DRF way,
with its answers, its failure counting and its errors. The bodies are byte for byte DRF's (tests hold them so).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseNotModified

from desk.api import headers, selectors
from desk.api.permissions import READER_ROLES
from tickets.accounts import authenticate_agent_token
from tickets.models import AgentToken

JSON = "application/json"


def reader(request: HttpRequest) -> AgentToken | None:
    """The agent token of a request the API would authenticate by token and let read, else None."""
    parts = request.META.get("HTTP_AUTHORIZATION", "").split()
    if len(parts) != 2 or parts[0].lower() != "token" or not parts[1].isascii():
        return None
    agent = authenticate_agent_token(key=parts[1])
    if agent is None or not agent.roles.names & READER_ROLES:
        return None
    return agent.token


def _answer(text: str, allow: str) -> HttpResponse:
    response = HttpResponse(text.encode(), content_type=JSON)
    response["Allow"] = allow
    return response


def state(request: HttpRequest, ticket_id: str, allow: str) -> HttpResponse | None:
    """The state GET (ETag = version, 304 to a matching If-None-Match), or None."""
    token = reader(request)
    if token is None:
        return None
    found = selectors.served_state(ticket_id)
    if found is None:
        return None
    if found.text is None or not token.allows_class(found.ticket_class_id):
        return None
    version, text = found.version, found.text
    tag = headers.etag(version)
    if headers.if_none_match_matches(request.META.get("HTTP_IF_NONE_MATCH"), version):
        response: HttpResponse = HttpResponseNotModified()
        response["Allow"] = allow
    else:
        response = _answer(text, allow)
    response["ETag"] = tag
    return response


def context(request: HttpRequest, ticket_id: str, allow: str) -> HttpResponse | None:
    """The context GET, or None."""
    token = reader(request)
    if token is None:
        return None
    found = selectors.served_context(ticket_id)
    if found is None or not token.allows_class(found[0]):
        return None
    return _answer(found[1].as_json_text(), allow)
