from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from desk.importer import ImportFileError, ImportTicket
from evals.baseline import BASELINES
from evals.results import EvalOptions, TicketResult
from evals.runner import evaluate
from evals.sources import expand, load
from evals.table import render
from evals.tau import DEFAULT_BUDGET

BAR_WIDTH = 30


class Progress:
    """A progress bar on stderr (stdout stays clean for --json); a single closing line when not a terminal."""

    def __init__(self, total: int, stream: OutputWrapper) -> None:
        self.total = total
        self.stream = stream
        self.tty = self.stream.isatty()

    def __call__(self, done: int, result: TicketResult) -> None:
        if not self.tty:
            return
        filled = BAR_WIDTH * done // max(self.total, 1)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self._write(f"\r[{bar}] {done}/{self.total} {result.ticket_id[:40]:<40}", ending="")

    def close(self, seconds: float) -> None:
        if self.tty:
            self._write("\r" + " " * (BAR_WIDTH + 60) + "\r", ending="")
        self._write(f"evaluated {self.total} ticket(s) in {seconds:.1f}s", ending="\n")

    def _write(self, text: str, *, ending: str) -> None:
        # Plain text: the command's stderr would otherwise be styled as an error.
        self.stream.write(text, style_func=str, ending=ending)
        self.stream.flush()


class Command(BaseCommand):
    help = (
        "Measure what compaction keeps: import tickets (sundry-ticket/1, tau-bench or tau2-bench files) into a "
        "rolled-back transaction, compact them with a small budget, and check that every irreversible action, "
        "constraint and open question survives in the pinned state, the summary and the context, and that a "
        "repeat of each action would be refused. The database is left untouched."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, help="files, or directories of .json/.jsonl files")
        parser.add_argument(
            "--summarizer",
            choices=["extractive", "openai"],
            default="extractive",
            help="summarizer backend (openai: the OpenAI-compatible server in OPENAI_BASE_URL / OPENAI_API_KEY)",
        )
        parser.add_argument(
            "--model", default=None, help="summarizer model (default: extractive-v1 / gpt-4.1-mini)"
        )
        parser.add_argument(
            "--budget",
            type=int,
            default=None,
            help="token budget for every ticket (default: the ticket's own class); for tau files, the budget on "
            f"top of the domain policy (default {DEFAULT_BUDGET})",
        )
        parser.add_argument(
            "--json", action="store_true", help="print the report (every figure) as JSON on stdout"
        )
        parser.add_argument("--tickets", action="store_true", help="also print one row per ticket")
        parser.add_argument(
            "--outcomes-model",
            default=None,
            help="ask this working model (OPENAI_BASE_URL) the decision questions with the full, desk and "
            "baseline contexts at each ticket's last compaction (evals/outcomes.py); default: not asked",
        )
        parser.add_argument(
            "--baseline",
            choices=list(BASELINES),
            default="first-sentence",
            help="the summary-only baseline: first-sentence (constructed, offline; always measured) or model "
            "(also a rolling summary written by the summarizer's model at each cut, through the same "
            "OPENAI_BASE_URL; the outcome questions' baseline context is then the model's)",
        )
        parser.add_argument(
            "--limit",
            type=int,
            default=None,
            help="at most this many tickets from each PATH (in file and ticket order): a bounded subset",
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="exit with status 1, naming the reasons, if a context ends over budget although a safe cut "
            "existed, an applied compaction did not shrink the request, a fact is lost from the pinned state "
            "or the context, a repeat probe is not refused, a pinned money total differs from the independent "
            "replay, or a "
            "ticket fails to import",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        budget = options["budget"]
        if budget is not None and budget < 256:
            raise CommandError("--budget must be at least 256 tokens")
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1 ticket")
        documents: list[tuple[str, ImportTicket]] = []
        try:
            for given in options["paths"]:
                # A directory is reported as one source (the project's eval set is one directory).
                taken: list[tuple[str, ImportTicket]] = []
                for path in expand([given]):
                    if limit is not None and len(taken) >= limit:
                        break
                    _, docs = load(path, tau_budget=budget or DEFAULT_BUDGET)
                    taken += [(str(given), doc) for doc in docs]
                documents += taken[:limit] if limit is not None else taken
        except ImportFileError as exc:
            raise CommandError(str(exc)) from None
        if options["baseline"] == "model" and options["summarizer"] == "extractive" and not options["model"]:
            raise CommandError(
                "--baseline model needs a model to write it: --summarizer openai, or --model NAME"
            )
        if not documents:
            raise CommandError("no tickets found in the given paths")

        eval_options = EvalOptions(
            summarizer=options["summarizer"],
            model=options["model"],
            budget=budget,
            outcomes_model=options["outcomes_model"],
            baseline=options["baseline"],
            limit=limit,
        )
        progress = Progress(len(documents), self.stderr)
        report = evaluate(documents, options=eval_options, progress=progress)
        progress.close(report.seconds)

        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
        else:
            self.stdout.write(render(report, tickets=options["tickets"]), ending="")
        if options["check"] and not report.ok:
            problems = report.problems()
            listed = "\n".join(f"  {p}" for p in problems[:20])
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            raise CommandError(f"--check failed, {len(problems)} problem(s):\n{listed}{more}")
