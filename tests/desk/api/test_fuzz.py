"""Schemathesis over the OpenAPI schema, in process through the WSGI app: no 5xx, no response off-schema.

Part of `make test`. Generated requests carry an agent's token; most are pointed at a ticket that exists,
so they get past the 404 into validation, the services and the success paths.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sundry.wsgi import application
from tests.factories import chat
from tickets.accounts import create_agent
from tickets.models import TicketClass
from tickets.services.lifecycle import open_ticket

schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", application)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture
def fuzz_token(db: None) -> Iterator[str]:
    # The WSGI app sends Django's request signals; like the test client, keep them from closing the
    # test's connection (and its transaction) between generated requests.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        ticket_class = TicketClass.objects.create(
            slug="standard-8k", token_budget=8000, compaction_threshold=0.8
        )
        ticket = open_ticket(
            ticket_id="T-FUZZ", order_id="SU-1", seller_type="marketplace", ticket_class=ticket_class
        )
        chat(ticket, 4)
        yield create_agent(name="agent-fuzz")
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_never_answers_5xx_nor_off_its_schema(case: schemathesis.Case, fuzz_token: str) -> None:
    ticket_id = (case.path_parameters or {}).get("ticket_id")
    # Two generated ids in three become the existing ticket; the third stays random (and meets the 404).
    if isinstance(ticket_id, str) and len(ticket_id) % 3:
        case.path_parameters["ticket_id"] = "T-FUZZ"  # type: ignore[index]
    case.call_and_validate(headers={"Authorization": f"Token {fuzz_token}"}, checks=CHECKS)
