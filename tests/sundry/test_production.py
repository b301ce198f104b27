"""Production settings: a long secret key, HTTPS by default (redirect and HSTS), and a clean `check --deploy`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

KEY = "pr0d-" + "Zq8vT2mLx9" * 5  # 55 characters

# The production variables the README documents.
PRODUCTION = {
    "SUNDRY_ENV": "production",
    "SECRET_KEY": KEY,
    "ALLOWED_HOSTS": "desk.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://desk.example.com",
    "DATABASE_URL": "postgres://desk@db.internal:5432/desk",
    "TASKS_BACKEND": "django_tasks_db.DatabaseBackend",
}
SETTINGS_READ = [
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SECURE_PROXY_SSL_HEADER",
    "SESSION_COOKIE_SECURE",
]


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    # DJANGO_ALLOW_ASYNC_UNSAFE is set by the browser tests' conftest; check --deploy rightly warns about it.
    dropped = {*PRODUCTION, "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE", *SETTINGS_READ}
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    clean.update(env)
    return subprocess.run(
        [sys.executable, *args], cwd=settings.BASE_DIR, env=clean, capture_output=True, text=True, check=False
    )


def read(**env: str) -> dict[str, str]:
    names = ", ".join(SETTINGS_READ)
    code = f"import sundry.settings as s; print('|'.join(repr(getattr(s, n, None)) for n in {names.split(', ')!r}))"
    result = run(["-c", code], **env)
    assert result.returncode == 0, result.stderr
    return dict(zip(SETTINGS_READ, result.stdout.strip().split("|"), strict=True))


def test_check_deploy_passes_at_warning_level_with_the_documented_variables() -> None:
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_fails_when_https_is_switched_off_without_a_proxy_header() -> None:
    result = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        **PRODUCTION,
        SECURE_SSL_REDIRECT="0",
        SECURE_HSTS_SECONDS="0",
    )
    assert result.returncode != 0
    assert "security.W008" in result.stderr and "security.W004" in result.stderr


@pytest.mark.parametrize(
    "key",
    [
        "x",
        "short-but-varied-key-0123456789",
        "x" * 64,
        "abcde" * 10,  # Django's own check passes it: 50 characters, 5 distinct
        "django-insecure-" + "Zq8vT2mLx9pr0dKw" * 3,  # startproject's key, however long
    ],
)
def test_production_refuses_a_short_or_repetitive_secret_key(key: str) -> None:
    result = run(["-c", "import sundry.settings"], **{**PRODUCTION, "SECRET_KEY": key})
    assert result.returncode != 0
    assert "at least 50 characters" in result.stderr


@pytest.mark.parametrize("hosts", ["*", "desk.example.com,*"])
def test_production_refuses_any_host(hosts: str) -> None:
    result = run(["-c", "import sundry.settings"], **{**PRODUCTION, "ALLOWED_HOSTS": hosts})
    assert result.returncode != 0
    assert "refuses ALLOWED_HOSTS='*'" in result.stderr


def test_production_redirects_to_https_and_sends_hsts_by_default() -> None:
    values = read(**PRODUCTION)
    assert values["SECURE_SSL_REDIRECT"] == "True"
    assert values["SECURE_HSTS_SECONDS"] == "31536000"
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] == "True"
    assert values["SECURE_HSTS_PRELOAD"] == "False"
    assert values["SESSION_COOKIE_SECURE"] == "True"


def test_behind_a_tls_terminating_proxy_the_redirect_switches_off_and_the_proxy_header_is_trusted() -> None:
    values = read(
        **PRODUCTION,
        SECURE_SSL_REDIRECT="off",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto",
        SECURE_HSTS_PRELOAD="1",
    )
    assert values["SECURE_SSL_REDIRECT"] == "False"
    assert values["SECURE_PROXY_SSL_HEADER"] == "('HTTP_X_FORWARDED_PROTO', 'https')"
    assert values["SECURE_HSTS_PRELOAD"] == "True"


def test_development_needs_no_variables_and_does_not_redirect() -> None:
    values = read()
    assert values["SECURE_SSL_REDIRECT"] == "None"  # Django's default (off) applies
    assert values["SECURE_PROXY_SSL_HEADER"] == "None"
