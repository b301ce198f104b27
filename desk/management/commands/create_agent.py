from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tickets.accounts import create_agent


class Command(BaseCommand):
    help = "Create an agent service account; prints its API token as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--class",
            dest="classes",
            action="append",
            default=[],
            metavar="SLUG",
            help="a ticket class the token may act on (repeat for more); none means every class",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            token = create_agent(name=options["name"], classes=options["classes"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        scope = ", ".join(options["classes"]) if options["classes"] else "every class"
        self.stdout.write(
            f"agent {options['name']} created, scoped to {scope}; its API token (shown once, stored hashed; revoke it with "
            f"`manage.py revoke_agent_token {options['name']}`):"
        )
        self.stdout.write(token)
