"""Agent tokens are stored hashed, revocable, and failed token authentication is throttled per token prefix
(or per address for keys no token has), never refusing a valid token."""

from __future__ import annotations

import importlib
from datetime import timedelta
from io import StringIO
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from tests.desk.api.conftest import url
from tickets.accounts import TOKEN_CACHE, authenticate_agent_token, create_agent, create_person, token_digest
from tickets.models import AgentToken, Ticket

pytestmark = pytest.mark.django_db


def client_with(key: str, address: str = "10.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_only_a_digest_and_a_prefix_are_stored(db: None) -> None:
    key = create_agent(name="bot")
    stored = AgentToken.objects.get(user__username="bot")
    assert len(key) >= 40 and key.startswith(stored.prefix)
    assert stored.digest == token_digest(key) and key not in stored.digest
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM tickets_agenttoken")
        assert not any(key in str(column) for row in cursor.fetchall() for column in row)


def test_a_key_with_the_right_prefix_but_a_wrong_secret_is_refused(ticket: Ticket) -> None:
    key = create_agent(name="bot")
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    response = client_with(forged).get(url(ticket, "state"))
    assert response.status_code == 401
    assert response.json()["error"] == "authentication_failed"


def test_the_first_state_read_costs_no_more_queries_than_before_and_later_ones_fewer(
    ticket: Ticket, django_assert_num_queries
) -> None:
    """Token and roles in one query; last_used_at written on the first use only (within a minute); then the
    token is kept for SUNDRY_AUTH_CACHE_SECONDS and read again only after them."""
    client = client_with(create_agent(name="bot"))
    with django_assert_num_queries(3):  # token+roles, last_used_at, the state
        assert client.get(url(ticket, "state")).status_code == 200
    first_use = AgentToken.objects.get().last_used_at
    assert first_use is not None
    with django_assert_num_queries(1):  # the state: the token is cached
        assert client.get(url(ticket, "state")).status_code == 200
    TOKEN_CACHE.clear()
    with django_assert_num_queries(2):  # token+roles, the state
        assert client.get(url(ticket, "state")).status_code == 200
    assert AgentToken.objects.get().last_used_at == first_use


def test_last_used_at_moves_again_after_a_minute(ticket: Ticket) -> None:
    client = client_with(create_agent(name="bot"))
    client.get(url(ticket, "state"))
    long_ago = timezone.now() - timedelta(minutes=2)
    AgentToken.objects.update(last_used_at=long_ago)
    client.get(url(ticket, "state"))  # within the cache's seconds: nothing read, nothing written
    assert AgentToken.objects.get().last_used_at == long_ago
    TOKEN_CACHE.clear()
    client.get(url(ticket, "state"))
    assert AgentToken.objects.get().last_used_at > long_ago


def test_revoking_by_name_or_prefix_stops_the_token_at_once(ticket: Ticket) -> None:
    first, second = create_agent(name="bot"), create_agent(name="other")
    assert client_with(first).get(url(ticket, "state")).status_code == 200
    out = StringIO()
    call_command("revoke_agent_token", "bot", stdout=out)
    assert "revoked 1 token" in out.getvalue()
    assert client_with(first).get(url(ticket, "state")).status_code == 401
    assert client_with(second).get(url(ticket, "state")).status_code == 200
    call_command(
        "revoke_agent_token", "--prefix", AgentToken.objects.get(user__username="other").prefix, stdout=out
    )
    assert client_with(second).get(url(ticket, "state")).status_code == 401
    with pytest.raises(CommandError, match="no live token"):
        call_command("revoke_agent_token", "bot", stdout=StringIO())
    with pytest.raises(CommandError, match="no user named"):
        call_command("revoke_agent_token", "nobody", stdout=StringIO())


def test_the_admin_lists_tokens_without_secrets_and_revokes_them(ticket: Ticket) -> None:
    key = create_agent(name="bot")
    token = AgentToken.objects.get()
    admin = Client()
    admin.force_login(create_person(username="ada", password="correct-horse-battery", role="admin"))
    listing = admin.get("/admin/tickets/agenttoken/").content.decode()
    detail = admin.get(f"/admin/tickets/agenttoken/{token.pk}/change/").content.decode()
    for page in (listing, detail):
        assert token.prefix in page
        assert key not in page and token.digest not in page
    assert admin.get("/admin/tickets/agenttoken/add/").status_code == 403
    response = admin.post(
        "/admin/tickets/agenttoken/",
        {"action": "revoke", "index": 0, "_selected_action": [token.pk]},
        follow=True,
    )
    assert "revoked 1 token" in response.content.decode().lower()
    assert AgentToken.objects.get().revoked_at is not None
    assert client_with(key).get(url(ticket, "state")).status_code == 401


def test_a_plaintext_drf_token_keeps_working_after_the_migration_and_is_erased(db: None) -> None:
    user = User.objects.create_user("legacy-bot")
    legacy_key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp, user_id integer)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token (key, created, user_id) VALUES (%s, %s, %s)",
            [legacy_key, timezone.now(), user.pk],
        )
    migration = importlib.import_module("tickets.migrations.0009_hashed_agent_tokens")
    migration.hash_plaintext_tokens(apps, SimpleNamespace(connection=connection))  # it only reads .connection
    found = authenticate_agent_token(key=legacy_key)
    assert found is not None and found.user == user
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0


@override_settings(SUNDRY_API_AUTH_FAILURE_LIMIT=3, SUNDRY_API_AUTH_COOLOFF_SECONDS=120)
def test_keys_no_token_has_are_answered_429_per_address_with_retry_after(ticket: Ticket) -> None:
    good = create_agent(name="bot")
    for n in range(3):
        response = client_with(f"sd_wrong-token-number-{n}").get(url(ticket, "state"))
        assert response.status_code == 401
    blocked = client_with(f"sd_wrong-token-number-{4}").get(url(ticket, "state"))
    assert blocked.status_code == 429
    assert blocked.json()["error"] == "too_many_failed_authentications"
    assert 0 < int(blocked["Retry-After"]) <= 120
    # a valid token is never refused because others failed, from this address or another
    assert client_with(good).get(url(ticket, "state")).status_code == 200
    assert client_with(good, address="10.0.0.2").get(url(ticket, "state")).status_code == 200
    # another address guessing is counted apart
    assert (
        client_with("sd_wrong-token-number-5", address="10.0.0.2").get(url(ticket, "state")).status_code
        == 401
    )


def test_a_hundred_bad_tokens_then_a_valid_one_from_the_same_address_is_200(ticket: Ticket) -> None:
    """The default limit (20) and cool-off: the fleet's valid tokens pass whatever one address sent before."""
    good = create_agent(name="bot")
    codes = [client_with(f"sd_{n:040d}").get(url(ticket, "state")).status_code for n in range(100)]
    assert set(codes[:20]) == {401} and set(codes[20:]) == {429}
    assert client_with(good).get(url(ticket, "state")).status_code == 200


@override_settings(SUNDRY_API_AUTH_FAILURE_LIMIT=3)
def test_a_revoked_token_in_a_retry_loop_throttles_itself_not_its_address(ticket: Ticket) -> None:
    """80 retries of one revoked key (4 workers x 20): that prefix gets 429; every other agent on the same
    egress address goes on with 200, and the counts live in the database, which every worker shares."""
    from tickets.accounts import revoke_agent_tokens
    from tickets.models import AuthFailure

    stale = create_agent(name="old-bot")
    revoke_agent_tokens(username="old-bot")
    others = [create_agent(name=f"bot-{n}") for n in range(3)]
    codes = [client_with(stale).get(url(ticket, "state")).status_code for _ in range(80)]
    assert codes[:3] == [401] * 3 and set(codes[3:]) == {429}
    assert [client_with(key).get(url(ticket, "state")).status_code for key in others] == [200] * 3
    assert list(AuthFailure.objects.values_list("subject", flat=True)) == [f"token:{stale[:12]}"]


@override_settings(SUNDRY_API_AUTH_FAILURE_LIMIT=3)
def test_only_failures_count_toward_the_limit(ticket: Ticket) -> None:
    good = client_with(create_agent(name="bot"))
    for _ in range(20):
        assert good.get(url(ticket, "state")).status_code == 200
    for n in range(2):
        assert client_with(f"sd_wrong-token-number-{n}").get(url(ticket, "state")).status_code == 401
    assert good.get(url(ticket, "state")).status_code == 200


@override_settings(SUNDRY_API_AUTH_FAILURE_LIMIT=2, SUNDRY_TRUSTED_PROXIES=1)
def test_behind_a_proxy_the_forwarded_address_is_throttled_not_the_proxy(ticket: Ticket) -> None:
    def via_proxy(key: str, client_ip: str) -> int:
        client = client_with(key, address="10.9.9.9")
        return client.get(url(ticket, "state"), HTTP_X_FORWARDED_FOR=f"6.6.6.6, {client_ip}").status_code

    assert [via_proxy("sd_bad-key-0000000", "203.0.113.7") for _ in range(3)] == [401, 401, 429]
    assert via_proxy("sd_bad-key-0000000", "203.0.113.8") == 401  # another client behind the same proxy
