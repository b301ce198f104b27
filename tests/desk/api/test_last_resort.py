"""When the database is down or a bug escapes, the API still answers JSON."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import Client, override_settings

SCRIPT = """
import json, django
django.setup()
from django.test import Client
client = Client()
answers = []
for method, path, headers in [
    ("get", "/api/v1/tickets/T-1/state/", {"HTTP_AUTHORIZATION": "Token sd_abcdefghijkl_secret"}),
    ("post", "/api/v1/tickets/", {"HTTP_AUTHORIZATION": "Token sd_abcdefghijkl_secret"}),
]:
    response = getattr(client, method)(path, **headers)
    answers.append([response.status_code, response["Content-Type"], response.get("Retry-After"), response.content.decode()])
print(json.dumps(answers))
"""


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_with_the_database_unreachable_the_api_answers_503_in_json() -> None:
    """A real PostgreSQL connection to a closed port: psycopg raises OperationalError on connect."""
    env = {k: v for k, v in os.environ.items() if k not in {"SUNDRY_ENV", "SECRET_KEY", "DEBUG"}}
    env.update(
        DATABASE_URL=f"postgres://desk@127.0.0.1:{closed_port()}/desk",
        DJANGO_SETTINGS_MODULE="sundry.settings",
        DEBUG="0",
    )
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout.strip().splitlines()[-1])
    for status, content_type, retry_after, body in answers:
        assert (status, content_type) == (503, "application/json")
        assert retry_after == "5"
        assert json.loads(body)["error"] == "database_unavailable"
    assert "database unavailable" in result.stderr  # and it is logged


@pytest.mark.django_db
@override_settings(ROOT_URLCONF="tests.desk.api.boom_urls", DEBUG=False)
def test_a_bug_under_api_is_a_json_500_and_elsewhere_the_html_page() -> None:
    client = Client(raise_request_exception=False)
    api = client.get("/api/v1/broken/")
    assert api.status_code == 500
    assert api.json()["error"] == "server_error"
    page = client.get("/broken/")
    assert page.status_code == 500
    assert page["Content-Type"].startswith("text/html")
