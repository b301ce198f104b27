from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tickets.accounts import create_agent


class Command(BaseCommand):
    help = "Create an agent service account; prints its API token as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            token = create_agent(name=options["name"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"agent {options['name']} created; its API token (shown once, stored hashed; revoke it with "
            f"`manage.py revoke_agent_token {options['name']}`):"
        )
        self.stdout.write(token)
