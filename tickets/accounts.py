"""Users and roles: agents (service accounts with a token), supervisors and admins are Django groups."""

from __future__ import annotations

from django.contrib.auth.models import Group, User
from django.db import transaction
from rest_framework.authtoken.models import Token

AGENT = "agent"
SUPERVISOR = "supervisor"
ADMIN = "admin"
ROLES = (AGENT, SUPERVISOR, ADMIN)


def has_role(user: object, role: str) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if role == ADMIN and getattr(user, "is_superuser", False):
        return True
    return user.groups.filter(name=role).exists()  # type: ignore[attr-defined]


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
