"""`make bench`: speed and memory of the paths an agent hits on every turn. Numbers, never assertions."""

from __future__ import annotations

import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection, reset_queries, transaction
from django.test.utils import CaptureQueriesContext

from compaction.models import CompactionEvent
from compaction.selectors import assemble_context, context_figures
from desk.demo import reference_ticket_path
from desk.importer import ImportTicket, import_ticket
from desk.turns import receive_turn
from tickets.models import Ticket, TicketClass
from tickets.services.actions import record_action
from tickets.services.lifecycle import open_ticket
from tickets.tokens import count_text


class Rollback(Exception):
    pass


class Command(BaseCommand):
    help = "Benchmark token counting, turn appends with compaction, context reads and imports (rolled back)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--turns", type=int, default=2000, help="turns in the long ticket (default 2000)")
        parser.add_argument(
            "--queue-tickets", type=int, default=100_000, help="tickets behind the queue (default 100000)"
        )
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        self.rows: list[tuple[str, str]] = []
        try:
            with transaction.atomic():
                self.run(options["turns"])
                self.run_queue(options["queue_tickets"])
                raise Rollback
        except Rollback:
            pass
        if options["json"]:
            self.stdout.write(json.dumps(dict(self.rows), indent=2))
            return
        width = max(len(name) for name, _ in self.rows)
        self.stdout.write(f"database: {connection.vendor}")
        for name, value in self.rows:
            self.stdout.write(f"{name.ljust(width)}  {value}")

    def record(self, name: str, value: str) -> None:
        self.rows.append((name, value))
        self.stderr.write(f"  {name}: {value}")

    def timed(self, label: str, work: Callable[[], Any]) -> tuple[float, Any]:
        self.stderr.write(f"{label}...")
        started = time.perf_counter()
        result = work()
        return time.perf_counter() - started, result

    def run(self, turn_count: int) -> None:
        scenario = json.loads(reference_ticket_path().read_text())
        tracking = scenario["turns"][18]["content"]

        elapsed, tokens = self.timed("token counting", lambda: sum(count_text(tracking) for _ in range(200)))
        self.record("tokenize (tokens/s)", f"{tokens / elapsed:,.0f}")

        def import_copies() -> int:
            for i in range(20):
                doc = dict(scenario, ticket_id=f"B-{i}")
                import_ticket(ImportTicket.model_validate(doc))
            return 20

        elapsed, copies = self.timed("importing 20 copies of T-40118", import_copies)
        self.record("import T-40118 (ms/ticket)", f"{elapsed / copies * 1000:.1f}")

        klass = TicketClass.objects.create(slug="bench-8k", token_budget=8000, compaction_threshold=0.8)
        ticket = open_ticket(
            ticket_id="B-LONG", order_id="SU-B", seller_type="marketplace", ticket_class=klass
        )
        roles = ["customer", "tool_call", "tool_result", "agent"]

        def thread(target: Ticket, count: int) -> None:
            for i in range(count):
                role = roles[i % 4]
                receive_turn(
                    ticket=target,
                    role=role,
                    content=""
                    if role == "tool_call"
                    else (tracking[: 400 + (i % 7) * 300] if role == "tool_result" else f"message {i}"),
                    tool="track_parcel" if role.startswith("tool") else "",
                    args={"order": "SU-B", "n": i} if role == "tool_call" else None,
                    tool_call_id=f"c{i // 4}" if role.startswith("tool") else "",
                    boundary="reply_sent" if role == "agent" else "",
                )
                if i % 40 == 3:
                    record_action(
                        ticket=target,
                        tool="issue_refund",
                        item=f"item-{i}",
                        amount_cents=100,
                        idempotency_key=f"b-{i}",
                    )

        elapsed, _ = self.timed(
            f"appending {turn_count} turns (policy and compaction inline)", lambda: thread(ticket, turn_count)
        )
        compactions = CompactionEvent.objects.filter(ticket=ticket, status="applied").count()
        self.record("append_turn (ms/turn, incl. compactions)", f"{elapsed / turn_count * 1000:.2f}")
        self.record("compactions applied on the long ticket", str(compactions))

        # Memory is measured apart: tracemalloc slows Python down several times.
        other = open_ticket(ticket_id="B-MEM", order_id="SU-M", seller_type="marketplace", ticket_class=klass)
        tracemalloc.start()
        thread(other, 400)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        self.record("peak Python memory over 400 appends (MiB)", f"{peak / 2**20:.1f}")

        samples = []
        reset_queries()  # DEBUG keeps a bounded query log; a full one would hide the count below
        with CaptureQueriesContext(connection) as queries:
            assemble_context(ticket)
        for _ in range(50):
            started = time.perf_counter()
            assemble_context(ticket)
            samples.append(time.perf_counter() - started)
        self.record("assemble_context (ms, median of 50)", f"{statistics.median(samples) * 1000:.2f}")
        self.record("assemble_context (queries)", str(len(queries)))
        samples = []
        for _ in range(200):
            started = time.perf_counter()
            context_figures(ticket)
            samples.append(time.perf_counter() - started)
        self.record("context_figures (ms, median of 200)", f"{statistics.median(samples) * 1000:.3f}")
        self.record(
            "long ticket context now (tokens)",
            f"{Ticket.objects.get(pk=ticket.pk).context_tokens} of {klass.token_budget}",
        )

    def run_queue(self, count: int) -> None:
        """The supervisors' queue over `count` tickets: the first page as the view builds it."""
        from django.core.paginator import Paginator

        from compaction.models import CompactionStatus
        from desk.pages import queue as queue_reads
        from tickets.models import PinnedState

        klass = TicketClass.objects.create(slug="bench-queue", token_budget=8000, compaction_threshold=0.8)

        def fill() -> None:
            batch = 5000
            for start in range(0, count, batch):
                tickets = Ticket.objects.bulk_create(
                    Ticket(
                        ticket_id=f"Q-{i:07d}",
                        order_id=f"SU-{i:07d}",
                        seller_type="marketplace",
                        ticket_class=klass,
                        system_prompt="p",
                        system_prompt_tokens=5,
                        context_tokens=(i * 7919) % 9000,
                        turn_count=i % 60,
                    )
                    for i in range(start, min(start + batch, count))
                )
                PinnedState.objects.bulk_create(PinnedState(ticket=t, data={}) for t in tickets)
                # One ticket in a hundred has a compaction with a coverage miss, one in 500 a failure.
                CompactionEvent.objects.bulk_create(
                    CompactionEvent(
                        ticket=t,
                        number=1,
                        at_turn=1,
                        status=CompactionStatus.FAILED if n % 5 == 0 else CompactionStatus.APPLIED,
                        first_replaced_turn=1,
                        last_replaced_turn=1,
                        tokens_before=7000,
                        tokens_after=1000,
                        threshold_tokens=6400,
                        coverage_missing_count=0 if n % 5 == 0 else 1,
                    )
                    for n, t in enumerate(tickets[::100])
                )
                self.stderr.write(f"\r  {min(start + batch, count):,}/{count:,} tickets", ending="")
            self.stderr.write("")

        self.timed(f"creating {count:,} queue tickets", fill)
        cases = {
            "newest": queue_reads.QueueFilters(),
            "most tokens": queue_reads.QueueFilters(sort="tokens"),
            "search by id prefix": queue_reads.QueueFilters(q="Q-00123"),
            "coverage-miss flag": queue_reads.QueueFilters(flags=(queue_reads.QueueFlag.COVERAGE_MISS,)),
            "failed flag": queue_reads.QueueFilters(flags=(queue_reads.QueueFlag.FAILED,)),
        }
        for label, filters in cases.items():
            samples = []
            for _ in range(5):
                started = time.perf_counter()
                page = Paginator(queue_reads.queue_tickets(filters), queue_reads.QUEUE_PAGE_SIZE).get_page(1)
                rows = list(page.object_list)
                total = page.paginator.count
                samples.append(time.perf_counter() - started)
            self.record(
                f"queue page, {label} (ms, median of 5)",
                f"{statistics.median(samples) * 1000:.1f} ({len(rows)} rows of {total:,})",
            )
