"""Users and roles: agents (service accounts with a token), supervisors and admins are Django groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from rest_framework.authtoken.models import Token

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


def roles_of(user: Any) -> Roles:
    """The one place that reads roles: one query, for the pages and the API alike."""
    if not getattr(user, "is_authenticated", False):
        return Roles(frozenset())
    names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    if getattr(user, "is_superuser", False):
        names.add(ADMIN)
    if ADMIN in names:
        names.add(SUPERVISOR)
    return Roles(frozenset(names))


def has_role(user: Any, role: str) -> bool:
    return role in roles_of(user).names


@transaction.atomic
def create_agent(*, name: str) -> str:
    """A new agent account with an unusable password (it cannot log in to the pages) and a token."""
    name = name.strip()
    if not name:
        raise ValueError("the agent needs a name")
    if User.objects.filter(username=name).exists():
        raise ValueError(f"a user named {name!r} already exists")
    user = User.objects.create_user(username=name)
    user.set_unusable_password()
    user.save(update_fields=["password"])
    user.groups.add(Group.objects.get(name=AGENT))
    return Token.objects.create(user=user).key


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
