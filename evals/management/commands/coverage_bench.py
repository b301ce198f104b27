from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evals.coverage_bench import MODEL_PAIRS, BenchFormatError, run_benchmark, run_model_pairs


class Command(BaseCommand):
    help = (
        "Run the coverage check over the labelled benchmark (evals/coverage/): precision and recall of "
        "'missing', for the development pairs and, separately, the held-out quarter; then, apart, on the "
        "labelled pairs from summaries the real model wrote (evals/fixtures/coverage/model_pairs.jsonl)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="every figure and each pair the check got wrong"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = run_benchmark()
            model = run_model_pairs() if MODEL_PAIRS.is_file() else None
        except BenchFormatError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            data = result.as_json()
            data["real_model_pairs"] = model.as_json() if model else None
            self.stdout.write(json.dumps(data, indent=2))
            return
        self.stdout.write(result.render())
        for pair in result.wrong:
            where = "held out" if pair.get("held_out") else "dev"
            self.stdout.write(f"  wrong ({where}): {pair.get('id')}: {pair.get('why') or ''}".rstrip(": "))
        if model is None:
            self.stdout.write(f"coverage check on real-model summaries: no labelled pairs at {MODEL_PAIRS}")
            return
        self.stdout.write(model.render())
        for d in model.disagreements:
            self.stdout.write(
                f"  disagree: {d['id']} ({d['kind']} {d['item_id']}): labelled {d['label']} ({d['reason']});"
                f" the check says {d['check']}"
            )
