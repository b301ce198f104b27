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
