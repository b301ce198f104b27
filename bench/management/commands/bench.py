"""`make bench`: the desk against baselines doing its work (PS for reads, R' for writes), the whole agent turn,
round trips on the wire, growth, memory (bench/run.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bench.measure import Options
from bench.run import render, run


class Command(BaseCommand):
    help = (
        "Measure the agent's hot paths (gunicorn, wrk or a Python load generator) against a plain Django view "
        "with SQL text (PS, reads) and a raw WSGI app running the desk's statements (R', writes): the whole "
        "agent turn with 16 agents, round trips on the wire, growth, worker memory; print the tables and write "
        "var/bench.json. PostgreSQL only; the database is flushed first. BENCH_PORTS=9400-9449 keeps the "
        "servers in a port range."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        d = Options()
        parser.add_argument(
            "--quick",
            action="store_true",
            help="1 round of 1 s per cell, 10k-ticket queue, 5,000-turn ticket, 1,000 mixed requests (developing)",
        )
        parser.add_argument(
            "--seconds", type=float, help=f"seconds of load per cell and round ({d.seconds:g})"
        )
        parser.add_argument(
            "--rounds", type=int, help=f"interleaved rounds; medians are reported ({d.rounds})"
        )
        parser.add_argument("--connections", type=int, help=f"concurrent connections ({d.connections})")
        parser.add_argument(
            "--growth-samples", type=int, help=f"samples per growth case ({d.growth_samples})"
        )
        parser.add_argument(
            "--queue-tickets", type=int, help=f"tickets in the large queue ({d.queue_tickets:,})"
        )
        parser.add_argument("--long-turns", type=int, help=f"turns of the long ticket ({d.long_turns:,})")
        parser.add_argument(
            "--agent-seconds", type=float, help=f"seconds per round of the agent turn ({d.agent_seconds:g})"
        )
        parser.add_argument(
            "--mix-requests",
            type=int,
            help=f"mixed requests before the second RSS reading ({d.mix_requests:,})",
        )
        parser.add_argument(
            "--connection-modes",
            action="store_true",
            help="also compare per-request, persistent and pooled connections (a minute more)",
        )
        parser.add_argument(
            "--output", default="var/bench.json", help="where the figures go (var/bench.json)"
        )
        parser.add_argument("--json", action="store_true", help="print the JSON instead of the tables")

    def handle(self, *args: Any, **options: Any) -> None:
        output = Path(options["output"])
        settings = Options.quick_run(output) if options["quick"] else Options(output=output)
        for name in (
            "seconds",
            "rounds",
            "connections",
            "growth_samples",
            "queue_tickets",
            "long_turns",
            "agent_seconds",
            "mix_requests",
        ):
            if options[name] is not None:
                setattr(settings, name, options[name])
        settings.connection_modes = options["connection_modes"]
        result = run(settings, lambda line: self.stderr.write(line))
        self.stdout.write(json.dumps(result, indent=2) if options["json"] else render(result))
        self.stdout.write(f"\nwrote {settings.output}")
