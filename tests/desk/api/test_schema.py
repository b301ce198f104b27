"""The OpenAPI schema and its docs page, served from vendored assets."""

from __future__ import annotations

import pytest
from django.test import Client
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(client: Client) -> dict:
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def test_the_schema_is_valid_openapi_3_and_lists_every_endpoint(schema: dict) -> None:
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")
    operations = {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert operations == {
        ("POST", "/api/v1/tickets/"),
        ("GET", "/api/v1/tickets/{ticket_id}/"),
        ("PATCH", "/api/v1/tickets/{ticket_id}/"),
        ("POST", "/api/v1/tickets/{ticket_id}/turns/"),
        ("GET", "/api/v1/tickets/{ticket_id}/state/"),
        ("POST", "/api/v1/tickets/{ticket_id}/state/"),
        ("POST", "/api/v1/tickets/{ticket_id}/actions/"),
        ("PATCH", "/api/v1/tickets/{ticket_id}/actions/{action_id}/"),
        ("GET", "/api/v1/tickets/{ticket_id}/history/"),
        ("POST", "/api/v1/tickets/{ticket_id}/handoffs/"),
        ("GET", "/api/v1/tickets/{ticket_id}/context/"),
        ("GET", "/api/v1/tickets/{ticket_id}/compactions/"),
    }


def test_the_schema_documents_the_headers_status_codes_and_examples(schema: dict) -> None:
    action = schema["paths"]["/api/v1/tickets/{ticket_id}/actions/"]["post"]
    assert {p["name"] for p in action["parameters"] if p["in"] == "header"} == {"Idempotency-Key"}
    assert {"201", "400", "401", "403", "404", "409", "413", "422"} <= set(action["responses"])
    assert "Idempotent-Replayed" in action["responses"]["201"]["headers"]
    assert action["requestBody"]["content"]["application/json"]["examples"]
    change = schema["paths"]["/api/v1/tickets/{ticket_id}/state/"]["post"]
    assert {"412", "428"} <= set(change["responses"])
    read = schema["paths"]["/api/v1/tickets/{ticket_id}/state/"]["get"]
    assert "304" in read["responses"] and "ETag" in read["responses"]["200"]["headers"]
    for path in (
        "/api/v1/tickets/",
        "/api/v1/tickets/{ticket_id}/turns/",
        "/api/v1/tickets/{ticket_id}/state/",
    ):
        assert schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["examples"], path


def test_the_docs_page_loads_swagger_ui_from_vendored_static_files(client: Client) -> None:
    response = client.get("/api/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower() and "https://" not in html
    assert (
        '<script src="/api/v1/docs/?script="></script>' in html
    )  # start-up code as a file: no inline script
    assert "/api/v1/schema/" in client.get("/api/v1/docs/?script=").content.decode()
