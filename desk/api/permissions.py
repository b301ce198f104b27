"""Who may do what through the API: agents write; agents, supervisors and admins read."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tickets.accounts import ADMIN, AGENT, SUPERVISOR, roles_of

READER_ROLES = {AGENT, SUPERVISOR, ADMIN}


class AgentWritesStaffReads(BasePermission):
    message = "this needs the agent role"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        roles = roles_of(request.user).names
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
