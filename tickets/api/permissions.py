"""Who may do what through the API: agents write; agents, supervisors and admins read."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tickets.accounts import ADMIN, AGENT, SUPERVISOR

READER_ROLES = {AGENT, SUPERVISOR, ADMIN}


def roles_of(user: Any) -> set[str]:
    """The user's roles in one query (superusers are admins)."""
    if not getattr(user, "is_authenticated", False):
        return set()
    roles = set(user.groups.values_list("name", flat=True))
    if user.is_superuser:
        roles.add(ADMIN)
    return roles


class AgentWritesStaffReads(BasePermission):
    message = "this needs the agent role"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        roles = roles_of(request.user)
        if request.method in SAFE_METHODS:
            if roles & READER_ROLES:
                return True
            self.message = "reading through the API needs the agent, supervisor or admin role"
            return False
        if AGENT in roles:
            return True
        self.message = (
            "only agents write through the API; supervisors correct state from the ticket page, with a reason"
        )
        return False
