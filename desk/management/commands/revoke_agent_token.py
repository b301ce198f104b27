from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tickets.accounts import revoke_agent_tokens


class Command(BaseCommand):
    help = "Revoke an agent's API tokens (every live one of NAME, or the one with --prefix)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", nargs="?", help="the agent's user name: revokes all its live tokens")
        parser.add_argument(
            "--prefix", help="revoke only the token whose key starts with this prefix (admin)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name, prefix = options["name"], options["prefix"]
        try:
            count = revoke_agent_tokens(username=name, prefix=prefix)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if count == 0:
            raise CommandError(f"no live token for {name or prefix!r}")
        self.stdout.write(f"revoked {count} token(s) of {name or prefix}")
