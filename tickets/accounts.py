"""Users and roles: agents (service accounts with a token), supervisors and admins are Django groups.

Agent tokens are stored hashed (tickets.models.AgentToken): the key is shown once, when it is issued.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import CharField, Exists, OuterRef, QuerySet, StringAgg, Subquery, Value
from django.db.models.functions import Cast
from django.utils import timezone

from tickets.compiled_reads import CompiledRead
from tickets.models import AgentToken, TicketClass

AGENT = "agent"
SUPERVISOR = "supervisor"
ADMIN = "admin"
ROLES = (AGENT, SUPERVISOR, ADMIN)


@dataclass(frozen=True)
class Roles:
    """A user's desk roles. Superusers are admins; admins are supervisors too."""

    names: frozenset[str]

    @property
    def agent(self) -> bool:
        return AGENT in self.names

    @property
    def supervisor(self) -> bool:
        return SUPERVISOR in self.names

    @property
    def admin(self) -> bool:
        return ADMIN in self.names


def _roles(names: set[str], *, superuser: bool) -> Roles:
    if superuser:
        names.add(ADMIN)
    if ADMIN in names:
        names.add(SUPERVISOR)
    return Roles(frozenset(names))


def roles_of(user: Any) -> Roles:
    """The one place that reads roles: one query, for the pages and the API alike; none when the token
    lookup already read them (authenticate_agent_token)."""
    if not getattr(user, "is_authenticated", False):
        return Roles(frozenset())
    known = getattr(user, "_desk_roles", None)
    if isinstance(known, Roles):
        return known
    names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    return _roles(names, superuser=getattr(user, "is_superuser", False))


def has_role(user: Any, role: str) -> bool:
    return role in roles_of(user).names


@transaction.atomic
def ticket_classes_named(slugs: Sequence[str]) -> list[TicketClass]:
    """The classes with these slugs, every one of which must exist (ValueError naming the unknown ones)."""
    wanted = list(dict.fromkeys(slug.strip() for slug in slugs))
    found = {c.slug: c for c in TicketClass.objects.filter(slug__in=wanted)}
    unknown = [slug for slug in wanted if slug not in found]
    if unknown:
        known = ", ".join(TicketClass.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
        raise ValueError(f"no ticket class {', '.join(map(repr, unknown))} (known: {known})")
    return [found[slug] for slug in wanted]


@transaction.atomic
def create_agent(*, name: str, classes: Sequence[str] = ()) -> str:
    """A new agent account with an unusable password (it cannot log in to the pages) and a token, scoped to
    the ticket classes named (their slugs; none = every class)."""
    name = name.strip()
    if not name:
        raise ValueError("the agent needs a name")
    if User.objects.filter(username=name).exists():
        raise ValueError(f"a user named {name!r} already exists")
    scope = ticket_classes_named(classes)
    user = User.objects.create_user(username=name)
    user.set_unusable_password()
    user.save(update_fields=["password"])
    user.groups.add(Group.objects.get(name=AGENT))
    return issue_agent_token(user=user, classes=scope)


# Tokens: "sd_" + 43 random URL-safe characters (256 bits). The first 12 characters find the row; the
# SHA-256 of the whole key proves it. Keys migrated from DRF's authtoken (40 hex) work the same way.
TOKEN_PREFIX_LENGTH = 12
TOKEN_MAX_LENGTH = 200
LAST_USED_PRECISION = timedelta(minutes=1)


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def issue_agent_token(*, user: User, classes: Sequence[TicketClass] = ()) -> str:
    """A new token for the user, scoped to `classes` (none = every class); the key is returned once and only
    its digest is kept."""
    key = "sd_" + secrets.token_urlsafe(32)
    token = AgentToken.objects.create(user=user, prefix=key[:TOKEN_PREFIX_LENGTH], digest=token_digest(key))
    if classes:
        token.ticket_classes.set(classes)
    return key


@dataclass(frozen=True)
class AuthenticatedAgent:
    user: User
    token: AgentToken
    roles: Roles


def known_token_prefix(key: str) -> bool:
    """A token (live or revoked) was issued with this key's prefix: its failures are that token's, not its
    address's."""
    if not TOKEN_PREFIX_LENGTH < len(key) <= TOKEN_MAX_LENGTH:
        return False
    return AgentToken.objects.filter(prefix=key[:TOKEN_PREFIX_LENGTH]).exists()


def _live_token(prefix: str) -> QuerySet[AgentToken]:
    has_role = {
        f"has_{role}": Exists(
            User.groups.through.objects.filter(user_id=OuterRef("user_id"), group__name=role)
        )
        for role in ROLES
    }
    # The classes the token is scoped to, in the same query: "3,7", or None for every class.
    scope = (
        AgentToken.ticket_classes.through.objects.filter(agenttoken_id=OuterRef("pk"))
        .order_by()
        .values("agenttoken_id")
        .annotate(ids=StringAgg(Cast("ticketclass_id", CharField()), delimiter=Value(",")))
        .values("ids")  # type: ignore[misc]  # the stubs do not see the annotation on a through model
    )
    return (
        AgentToken.objects.select_related("user")
        .filter(prefix=prefix, revoked_at__isnull=True, user__is_active=True)
        .annotate(**has_role, scope_ids=Subquery(scope, output_field=CharField()))
        .order_by()[:1]
    )


# Every API request reads it: compiled once per process (tickets.compiled_reads), run with the key's prefix.
LIVE_TOKEN = CompiledRead(_live_token, str)


class TokenCache:
    """Live tokens this process authenticated lately, by the SHA-256 of the key, for `seconds`
    (settings.SUNDRY_AUTH_CACHE_SECONDS): a request within them reads nothing. A token revoked, or a user
    deactivated, in another process is refused here once its entry is older than that; a change this process
    makes (revoke_agent_tokens, a save of a token, a user or their groups) empties the cache at once.

    `clock` is what tells the time (monotonic seconds): tests set it instead of sleeping.
    """

    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self.clock: Callable[[], float] = time.monotonic
        self._entries: dict[str, tuple[float, AuthenticatedAgent]] = {}

    def get(self, digest: str) -> AuthenticatedAgent | None:
        found = self._entries.get(digest)
        if found is None:
            return None
        if self.clock() >= found[0]:
            self._entries.pop(digest, None)
            return None
        return found[1]

    def put(self, digest: str, agent: AuthenticatedAgent) -> None:
        seconds = float(getattr(settings, "SUNDRY_AUTH_CACHE_SECONDS", 0) or 0)
        if seconds <= 0:
            return
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()  # a flood of distinct live keys: start again rather than grow
        self._entries[digest] = (self.clock() + seconds, agent)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


TOKEN_CACHE = TokenCache()


def authenticate_agent_token(*, key: str) -> AuthenticatedAgent | None:
    """The live token for a key and its user's roles: from this process's TokenCache when it authenticated the
    key within SUNDRY_AUTH_CACHE_SECONDS (no query), else in one compiled query; None for anything else.

    Roles are attached to the user so roles_of needs no query. last_used_at is written at most once a minute.
    """
    if not TOKEN_PREFIX_LENGTH < len(key) <= TOKEN_MAX_LENGTH:
        return None
    digest = token_digest(key)
    cached = TOKEN_CACHE.get(digest)
    if cached is not None:
        return cached
    found = LIVE_TOKEN.all(key[:TOKEN_PREFIX_LENGTH])
    token = found[0] if found else None
    if token is None or not hmac.compare_digest(token.digest, digest):
        return None
    # Read by AgentToken.allows_class (request.auth in the API): None = every class.
    scope_ids: str | None = token.scope_ids  # type: ignore[attr-defined]
    token.set_class_scope(frozenset(int(i) for i in scope_ids.split(",")) if scope_ids else None)
    user = token.user
    names = {role for role in ROLES if getattr(token, f"has_{role}")}
    roles = _roles(names, superuser=user.is_superuser)
    user._desk_roles = roles  # type: ignore[attr-defined]  # read by roles_of
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_PRECISION:
        AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    agent = AuthenticatedAgent(user=user, token=token, roles=roles)
    TOKEN_CACHE.put(digest, agent)
    return agent


@transaction.atomic
def revoke_agent_tokens(*, username: str | None = None, prefix: str | None = None) -> int:
    """Revoke every live token of a user, or the one token with a prefix; how many were revoked."""
    if (username is None) == (prefix is None):
        raise ValueError("name a user or a token prefix, not both")
    live = AgentToken.objects.filter(revoked_at__isnull=True)
    if username is not None:
        if not User.objects.filter(username=username).exists():
            raise ValueError(f"no user named {username!r}")
        live = live.filter(user__username=username)
    else:
        live = live.filter(prefix=prefix)
    TOKEN_CACHE.clear()  # this process refuses the revoked keys at once; the others within their cache's seconds
    return live.update(revoked_at=timezone.now())


@transaction.atomic
def create_person(*, username: str, password: str, role: str) -> User:
    """A supervisor or admin who logs in with a password."""
    if role not in (SUPERVISOR, ADMIN):
        raise ValueError(f"role must be supervisor or admin, not {role!r}")
    user = User.objects.create_user(username=username, password=password, is_staff=role == ADMIN)
    user.groups.add(Group.objects.get(name=role))
    if role == ADMIN:
        user.groups.add(Group.objects.get(name=SUPERVISOR))
        user.is_superuser = True
        user.save(update_fields=["is_superuser"])
    return user
