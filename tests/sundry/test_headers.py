"""Every response carries the Content-Security-Policy; only the API docs relax it (inline styles only)."""

from __future__ import annotations

import pytest
from django.test import Client

from tickets.accounts import create_person

pytestmark = pytest.mark.django_db


def directives(header: str) -> dict[str, str]:
    return {part.split()[0]: part.strip() for part in header.split(";") if part.strip()}


def test_pages_admin_login_and_api_all_send_the_strict_policy() -> None:
    client = Client()
    client.force_login(create_person(username="ada", password="correct-horse-battery", role="admin"))
    for path in ("/", "/metrics/", "/classes/", "/admin/", "/api/v1/tickets/T-0/", "/api/v1/nothing/"):
        policy = directives(client.get(path)["Content-Security-Policy"])
        assert policy["script-src"].startswith("script-src 'self'"), path  # a nonce only where one was used
        assert "unsafe-inline" not in policy["script-src"] and "unsafe-inline" not in policy["style-src"], (
            path
        )
        assert (
            policy["object-src"] == "object-src 'none'"
            and policy["frame-ancestors"] == "frame-ancestors 'none'"
        )
    login = Client().get("/accounts/login/")
    nonce = directives(login["Content-Security-Policy"])["script-src"].split("'nonce-")[1].rstrip("'")
    assert (
        f'nonce="{nonce}"' in login.content.decode()
    )  # the one script element carries this response's nonce
    assert "<script>" not in login.content.decode()  # and none is inline


def test_the_api_docs_allow_inline_styles_but_no_inline_script() -> None:
    response = Client().get("/api/v1/docs/")
    policy = directives(response["Content-Security-Policy"])
    assert policy["style-src"] == "style-src 'self' 'unsafe-inline'"
    assert "unsafe-inline" not in policy["script-src"]
    assert "<script>" not in response.content.decode()
