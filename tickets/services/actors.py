"""Who makes a change: an agent's service account, a supervisor, or the desk itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.vocabulary import ActorKind

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Actor:
    kind: ActorKind
    user: User | None = None

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.user.username}" if self.user else str(self.kind)


SYSTEM = Actor(kind=ActorKind.SYSTEM)
