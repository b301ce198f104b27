from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evals.coverage_bench import BenchFormatError, run_benchmark


class Command(BaseCommand):
    help = (
        "Run the coverage check over the labelled benchmark (evals/coverage/): precision and recall of "
        "'missing', for the development pairs and, separately, the held-out quarter."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="every figure and each pair the check got wrong"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = run_benchmark()
        except BenchFormatError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), indent=2))
            return
        self.stdout.write(result.render())
        for pair in result.wrong:
            where = "held out" if pair.get("held_out") else "dev"
            self.stdout.write(f"  wrong ({where}): {pair.get('id')}: {pair.get('why') or ''}".rstrip(": "))
