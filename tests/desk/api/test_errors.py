"""Every 4xx is JSON with a message: body size, methods, unknown addresses."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from tests.desk.api.conftest import url
from tickets.models import Ticket, Turn

pytestmark = pytest.mark.django_db


def test_a_body_over_the_limit_is_answered_413_and_nothing_is_stored(
    agent: APIClient, ticket: Ticket
) -> None:
    body = json.dumps({"role": "customer", "content": "x" * (300 * 1024)})
    response = agent.post(url(ticket, "turns"), body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
    assert "at most" in response.json()["message"]
    assert not Turn.objects.filter(ticket=ticket).exists()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_the_limit_comes_from_the_setting(agent: APIClient, ticket: Ticket) -> None:
    small = agent.post(url(ticket, "turns"), {"role": "customer", "content": "x" * 900}, format="json")
    large = agent.post(url(ticket, "turns"), {"role": "customer", "content": "x" * 1100}, format="json")
    assert (small.status_code, large.status_code) == (201, 413)


def test_a_method_the_endpoint_does_not_have_is_answered_405_in_json(
    agent: APIClient, ticket: Ticket
) -> None:
    response = agent.delete(url(ticket, "turns"))
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"
    assert "POST" in response["Allow"]


def test_a_body_that_is_not_json_is_answered_415(agent: APIClient, ticket: Ticket) -> None:
    response = agent.post(
        url(ticket, "turns"), "role=customer", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415
    assert response.json()["message"]


def test_an_unknown_api_address_is_answered_404_in_json(agent: APIClient, db: None) -> None:
    response = agent.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


@pytest.mark.parametrize(
    "path", ["/api/v1/tickets", "/api/v1", "/api", "/api/v2/tickets/", "/api/v1/tickets/T-1/turns"]
)
def test_an_api_address_without_its_slash_or_unknown_is_a_json_404_even_for_a_post(
    path: str, db: None
) -> None:
    """No CSRF page, no redirect that would turn the POST into a GET of an HTML page."""
    client = APIClient(enforce_csrf_checks=True)
    for method in ("get", "post", "put", "delete"):
        response = getattr(client, method)(path, {"role": "customer"}, format="json")
        assert response.status_code == 404, (method, path)
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"] == "not_found"


def test_an_unknown_method_on_an_endpoint_is_a_json_405(agent: APIClient, ticket: Ticket) -> None:
    response = agent.generic("BREW", url(ticket, "state"))
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"role": "tool_call", "tool": "t", "tool_call_id": "c", "args": {"a": 1e400}}', "args.a"),
        ('{"role": "tool_call", "tool": "t", "tool_call_id": "c", "args": {"a": [1, -1e999]}}', "args.a[1]"),
        (
            '{"role": "tool_call", "tool": "t", "tool_call_id": "c", "args": {"n": 99999999999999999999}}',
            "args.n",
        ),
        ('{"role": "customer", "content": "hi", "boundary": "", "x": -9223372036854775809}', "x"),
    ],
)
def test_numbers_that_cannot_be_stored_are_a_400_naming_the_field(
    agent: APIClient, ticket: Ticket, body: str, field: str
) -> None:
    response = agent.post(url(ticket, "turns"), body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid"
    assert field in response.json()["fields"]
    assert "out of range" in response.json()["message"]
    assert not Turn.objects.filter(ticket=ticket).exists()


def test_the_largest_64_bit_integer_is_still_accepted(agent: APIClient, ticket: Ticket) -> None:
    body = '{"role": "tool_call", "tool": "t", "tool_call_id": "c", "args": {"n": 9223372036854775807, "f": 1.5e300}}'
    response = agent.post(url(ticket, "turns"), body, content_type="application/json")
    assert response.status_code == 201, response.content
    args = Turn.objects.get(ticket=ticket).args
    assert args["n"] == 9223372036854775807
    assert float(args["f"]) == 1.5e300  # PostgreSQL's jsonb gives it back without the exponent


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_and_nothing_is_stored(
    agent: APIClient, ticket: Ticket, constant: str
) -> None:
    body = f'{{"tool": "issue_refund", "item": "mug", "at_turn": 1, "reversible": true, "args": {{"ratio": {constant}}}}}'
    response = agent.post(
        url(ticket, "actions"), body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert response.status_code == 400
    assert constant.lstrip("-") in response.json()["message"]


def test_a_key_twice_in_one_object_is_a_400_naming_it_not_last_one_wins(
    agent: APIClient, ticket: Ticket
) -> None:
    from tests.factories import add_turns

    add_turns(ticket, {"role": "customer", "content": "refund please"})
    body = '{"tool": "issue_refund", "item": "mug", "amount_cents": 1, "at_turn": 1, "reversible": false, "amount_cents": 999999}'
    response = agent.post(
        url(ticket, "actions"), body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    assert response.status_code == 400
    assert "amount_cents" in response.json()["fields"]
    assert "more than once" in response.json()["message"]
    nested = '{"tool": "t", "item": "i", "at_turn": 1, "reversible": true, "args": {"a": 1, "a": 2}}'
    response = agent.post(
        url(ticket, "actions"), nested, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k2"
    )
    assert response.status_code == 400
    assert "a" in response.json()["fields"]


def test_a_name_over_its_max_length_is_refused_even_when_trimming_would_bring_it_under(
    agent: APIClient, ticket: Ticket
) -> None:
    """Seen by the fuzzer: a leading U+0085 (whitespace to Python) put a 201-character name under the limit."""
    long_name = "\u0085" + "a" * 200
    response = agent.post(
        url(ticket, "handoffs"), {"from_agent": "triage", "to_agent": long_name}, format="json"
    )
    assert response.status_code == 400
    assert "to_agent" in json.dumps(response.json())
    fine = agent.post(
        url(ticket, "handoffs"), {"from_agent": "triage", "to_agent": " billing "}, format="json"
    )
    assert fine.status_code == 201
