"""Settings come from the environment and fail loudly on a bad value."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings

GOOD_KEY = "k3y-" + "abcdefghij" * 5  # 54 characters, more than 5 distinct


def load_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "SUNDRY_ENV", "DATABASE_URL"}
    }
    clean.update(env)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sundry.settings as s; print(s.DEBUG, s.DATABASES['default']['ENGINE'])",
        ],
        cwd=settings.BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_embedded_defaults_need_no_variables() -> None:
    result = load_settings()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "django.db.backends.sqlite3"]


def test_production_refuses_to_start_without_a_secret_key() -> None:
    result = load_settings(SUNDRY_ENV="production")
    assert result.returncode != 0
    assert "needs SECRET_KEY" in result.stderr


def test_production_refuses_to_start_with_debug_on() -> None:
    result = load_settings(SUNDRY_ENV="production", SECRET_KEY=GOOD_KEY, DEBUG="1")
    assert result.returncode != 0
    assert "DEBUG on" in result.stderr


def test_production_with_a_key_and_postgres_starts() -> None:
    result = load_settings(
        SUNDRY_ENV="production", SECRET_KEY=GOOD_KEY, DATABASE_URL="postgres://desk@db.internal:5432/desk"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "django.db.backends.postgresql"]


def test_a_bad_boolean_is_an_error_not_a_guess() -> None:
    result = load_settings(DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_a_bad_number_is_an_error_not_a_crash_later() -> None:
    result = load_settings(SUNDRY_SUMMARIZER_TIMEOUT_SECONDS="soon")
    assert result.returncode != 0
    assert "SUNDRY_SUMMARIZER_TIMEOUT_SECONDS='soon' is not a number" in result.stderr


def _database_settings(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DATABASE_") and k != "SUNDRY_ENV"}
    clean.update(env)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sundry.settings as s; d = s.DATABASES['default']; "
            "print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'], s.SUNDRY_AUTH_CACHE_SECONDS)",
        ],
        cwd=settings.BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_persistent_connections_take_no_health_check_round_trip_by_default() -> None:
    postgres = {"DATABASE_URL": "postgres://desk@db.internal:5432/desk"}
    assert _database_settings(**postgres) == ["600", "False", "5.0"]
    assert _database_settings(**postgres, DATABASE_CONN_HEALTH_CHECKS="1")[:2] == ["600", "True"]


def test_a_negative_auth_cache_is_an_error() -> None:
    result = load_settings(SUNDRY_AUTH_CACHE_SECONDS="-1")
    assert result.returncode != 0
    assert "SUNDRY_AUTH_CACHE_SECONDS" in result.stderr
