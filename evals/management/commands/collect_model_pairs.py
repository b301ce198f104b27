from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from desk.importer import ImportFileError
from evals.local_model import MODEL_ALIAS, LocalModelUnavailable, serve
from evals.model_pairs import MODEL_PAIRS, append_pairs, collect, collection_record, numbered, write_pairs

DEFAULT_INPUTS = [
    "demo/evalset",
    "evals/fixtures/tau",
    "demo/realdata/tau2-retail-gpt-4.1.json",
]


class Command(BaseCommand):
    help = (
        "Compact real inputs with the openai backend against the local model (or OPENAI_BASE_URL) and write one "
        "unlabelled coverage pair per pinned item of each summary, with the model's raw reply."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="*", help=f"inputs (default: {' '.join(DEFAULT_INPUTS)})")
        parser.add_argument("--out", default=str(MODEL_PAIRS), help="the JSON Lines file to write")
        parser.add_argument("--tickets-per-file", type=int, default=None)
        parser.add_argument(
            "--skip-tickets", type=int, default=0, help="start after this many tickets per file"
        )
        parser.add_argument("--first-id", type=int, default=1, help="number the pairs from this (mp-NNN)")
        parser.add_argument("--max-items", type=int, default=6, help="pairs per summary at most")
        parser.add_argument("--max-summaries", type=int, default=None)
        parser.add_argument(
            "--port",
            type=int,
            default=None,
            help="start the local model server on this port (default: use OPENAI_BASE_URL as set)",
        )
        parser.add_argument("--model", default=None, help=f"the model name (default {MODEL_ALIAS})")

    def handle(self, *args: Any, **options: Any) -> None:
        paths = [Path(p) for p in options["paths"] or DEFAULT_INPUTS]
        model = options["model"] or os.environ.get("SUNDRY_MODEL_NAME") or MODEL_ALIAS
        with ExitStack() as stack:
            if options["port"] is not None:
                try:
                    server = stack.enter_context(serve(port=options["port"]))
                except LocalModelUnavailable as exc:
                    raise CommandError(str(exc)) from None
                os.environ.update(server.env())
            base_url = os.environ.get("OPENAI_BASE_URL", "")
            if not base_url:
                raise CommandError("no model server: give --port, or set OPENAI_BASE_URL and OPENAI_API_KEY")
            record = collection_record(
                model=model,
                base_url=base_url,
                settings={
                    "temperature": 0,
                    "max_tokens": int(os.environ.get("SUNDRY_MODEL_MAX_TOKENS", "1024")),
                    "threads": int(os.environ.get("SUNDRY_MODEL_THREADS", "1")),
                    "tickets_per_file": options["tickets_per_file"],
                    "skip_tickets": options["skip_tickets"],
                    "max_items_per_summary": options["max_items"],
                    "inputs": [str(p) for p in paths],
                },
            )
            out = Path(options["out"])
            write_pairs([], out)
            written = options["first_id"] - 1

            def write(pairs: list[dict[str, Any]]) -> None:
                nonlocal written
                append_pairs(numbered(pairs, collection=record, start=written + 1), out)
                written += len(pairs)

            try:
                collected = collect(
                    paths,
                    model=model,
                    tickets_per_file=options["tickets_per_file"],
                    skip_tickets=options["skip_tickets"],
                    max_items=options["max_items"],
                    max_summaries=options["max_summaries"],
                    progress=lambda line: self.stdout.write(line),
                    on_pairs=write,
                )
            except ImportFileError as exc:
                raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{len(collected.pairs)} pairs from {collected.summaries} summaries of {collected.tickets} tickets "
            f"({collected.failed} compactions failed every attempt) -> {out}"
        )
