"""Failed logins are throttled per account and address together (django-axes) with a finite cool-off and a
clear page: guesses at one account never lock another out."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.test import Client, override_settings
from django.utils import timezone

from tickets.accounts import create_person

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery"


def attempt(username: str, password: str, address: str = "198.51.100.1") -> Any:
    return Client(REMOTE_ADDR=address).post(
        "/accounts/login/", {"username": username, "password": password, "next": "/"}
    )


@override_settings(AXES_FAILURE_LIMIT=5, AXES_COOLOFF_TIME=timedelta(minutes=15))
def test_after_five_wrong_passwords_the_right_one_is_refused_with_a_429_page_until_the_cool_off() -> None:
    create_person(username="sally", password=PASSWORD, role="supervisor")
    for _ in range(4):
        assert attempt("sally", "guess").status_code == 200  # the form again, with its error
    locked = attempt("sally", "guess")
    assert locked.status_code == 429
    right = attempt("sally", PASSWORD)
    assert right.status_code == 429
    page = right.content.decode()
    assert "Too many failed logins" in page and "15 minutes" in page and "sally" in page
    assert right["Retry-After"] == "900"
    assert "_auth_user_id" not in right.client.session
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))  # the cool-off passes
    after = attempt("sally", PASSWORD)
    assert after.status_code == 302 and after["Location"] == "/"


@override_settings(AXES_FAILURE_LIMIT=3)
def test_an_account_is_locked_from_the_address_that_guessed() -> None:
    create_person(username="sally", password=PASSWORD, role="supervisor")
    for _ in range(3):
        attempt("sally", "guess", address="203.0.113.1")
    assert attempt("sally", PASSWORD, address="203.0.113.1").status_code == 429
    assert attempt("sally", PASSWORD, address="203.0.113.99").status_code == 302  # sally at her own desk


@override_settings(AXES_FAILURE_LIMIT=3)
def test_failures_on_one_account_do_not_lock_another_out_of_the_same_address() -> None:
    """The issue's case: failures on `supervisor` locked `admin` out of the office's one address."""
    create_person(username="supervisor", password=PASSWORD, role="supervisor")
    create_person(username="admin", password=PASSWORD, role="admin")
    for _ in range(5):
        attempt("supervisor", "guess", address="203.0.113.5")
    assert attempt("supervisor", PASSWORD, address="203.0.113.5").status_code == 429
    assert attempt("admin", PASSWORD, address="203.0.113.5").status_code == 302


def test_the_admin_login_is_throttled_too() -> None:
    create_person(username="ada", password=PASSWORD, role="admin")
    client = Client(REMOTE_ADDR="192.0.2.1")
    for _ in range(5):
        client.post("/admin/login/", {"username": "ada", "password": "guess"})
    assert client.post("/admin/login/", {"username": "ada", "password": PASSWORD}).status_code == 429
