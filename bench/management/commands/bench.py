"""`make bench`: the desk against a plain Django view and a raw WSGI app, query counts, growth (bench/run.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bench.run import Options, render, run


class Command(BaseCommand):
    help = (
        "Measure the agent's hot paths (gunicorn, wrk or a Python load generator) against a plain Django view and "
        "a raw WSGI app, query counts and growth; print the tables and write var/bench.json. PostgreSQL only; "
        "the database is flushed first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--seconds", type=float, default=3.0, help="seconds of load per cell and round (3)"
        )
        parser.add_argument(
            "--rounds", type=int, default=3, help="interleaved rounds; medians are reported (3)"
        )
        parser.add_argument("--connections", type=int, default=16, help="concurrent connections (16)")
        parser.add_argument(
            "--growth-samples", type=int, default=15, help="sequential samples per growth case"
        )
        parser.add_argument("--queue-tickets", type=int, default=100_000, help="tickets for the large queue")
        parser.add_argument(
            "--no-connection-modes",
            action="store_true",
            help="skip the per-request/persistent/pool comparison",
        )
        parser.add_argument(
            "--output", default="var/bench.json", help="where the figures go (var/bench.json)"
        )
        parser.add_argument("--json", action="store_true", help="print the JSON instead of the tables")

    def handle(self, *args: Any, **options: Any) -> None:
        settings = Options(
            seconds=options["seconds"],
            rounds=options["rounds"],
            connections=options["connections"],
            growth_samples=options["growth_samples"],
            queue_tickets=options["queue_tickets"],
            connection_modes=not options["no_connection_modes"],
            output=Path(options["output"]),
        )
        result = run(settings, lambda line: self.stderr.write(line))
        self.stdout.write(json.dumps(result, indent=2) if options["json"] else render(result))
        self.stdout.write(f"\nwrote {settings.output}")
