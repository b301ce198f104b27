"""`manage.py load_faults`: agents against the production deploy while faults are injected, then counted.

gunicorn as deployed (deploy/gunicorn.conf.py, the production settings, PostgreSQL, 4 sync workers) and a
summarizer that hangs every other call; AGENTS threads run the README's agent loop (bench/faults/agents.py) for
SECONDS while a fault is injected every few seconds: a worker killed with SIGKILL, and every MASTER_EVERY
seconds instead the master sent HUP (a reload) or stopped and started again, in turn. Then the agents' own logs
are counted against the database (bench/faults/counts.py): lost and doubled turns, state changes and actions,
expected 0 and 0. Prints progress and a summary, writes var/load_faults.json (the agents' log and gunicorn's
beside it), and exits 1 when anything was lost or doubled. Not part of the test
suite (tests/bench/test_load_faults.py runs it for a few seconds).
"""

from __future__ import annotations

import json
import random
import secrets
import subprocess
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.faults.agents import Agent, Client, Stats
from bench.faults.counts import count
from bench.faults.servers import Gunicorn, production_env
from bench.faults.summarizer import hanging_summarizer
from tickets.accounts import AGENT, create_agent
from tickets.models import TicketClass
from tickets.services.lifecycle import open_ticket

PROGRESS_EVERY = 5.0


class Command(BaseCommand):
    help = "Agents against gunicorn with workers killed, the master restarted and a hanging summarizer; counts lost and doubled writes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--seconds", type=float, default=60.0, help="how long the agents run (default 60)"
        )
        parser.add_argument("--agents", type=int, default=20)
        parser.add_argument("--workers", type=int, default=4, help="gunicorn sync workers (default 4)")
        parser.add_argument("--port", type=int, default=9170, help="gunicorn's loopback port")
        parser.add_argument("--summarizer-port", type=int, default=9171)
        parser.add_argument(
            "--fault-every", type=float, default=4.0, help="seconds between faults (default 4)"
        )
        parser.add_argument(
            "--master-every",
            type=float,
            default=30.0,
            help="the master's faults, HUP and restart in turn, one every this many seconds (default 30); "
            "every other fault kills a random worker",
        )
        parser.add_argument("--deadline", type=float, default=3.0, help="the servers' compaction deadline, s")
        parser.add_argument("--token-budget", type=int, default=2000, help="the agents' ticket class budget")
        parser.add_argument(
            "--output",
            default=str(Path(settings.BASE_DIR) / "var" / "load_faults.json"),
            help="the report; the agents' own log goes beside it (.log.jsonl)",
        )
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
            raise CommandError("load_faults runs the deploy on PostgreSQL: set DATABASE_URL=postgres://...")
        rng = random.Random(options["seed"])
        run = secrets.token_hex(3)
        tokens, tickets = self.setup(run=run, agents=options["agents"], budget=options["token_budget"])
        output = Path(options["output"])
        output.parent.mkdir(parents=True, exist_ok=True)
        gunicorn_log = output.with_suffix(".gunicorn.log")
        gunicorn_log.write_text("")
        # Production wants a STATIC_ROOT; the agents fetch no static file, so an empty directory will do.
        with (
            tempfile.TemporaryDirectory(prefix="sundry-load-faults-") as static_root,
            hanging_summarizer(options["summarizer_port"]) as summarizer,
        ):
            env = production_env(
                static_root=Path(static_root),
                extra={
                    "OPENAI_BASE_URL": summarizer.base_url,
                    "OPENAI_API_KEY": "sk-load-faults-loopback",
                    "SUNDRY_COMPACTION_DEADLINE_SECONDS": str(options["deadline"]),
                    "SUNDRY_COMPACTION_LEASE_GRACE_SECONDS": "2",
                    # 20 agents share one address: the failed-token throttle must never matter here.
                    "SUNDRY_API_AUTH_FAILURE_LIMIT": "1000",
                },
            )
            server = Gunicorn(port=options["port"], workers=options["workers"], env=env, log=gunicorn_log)
            self.stdout.write(
                f"==> gunicorn on 127.0.0.1:{options['port']} ({options['workers']} sync workers, production "
                f"settings), {options['agents']} agents for {options['seconds']:.0f}s, a fault every "
                f"{options['fault_every']:.0f}s (log {gunicorn_log})"
            )
            server.start()
            try:
                report = self.load(server, tokens, tickets, rng, options)
            finally:
                server.stop()
            report["summarizer"] = {"calls": summarizer.calls, "hung": summarizer.hung}
        log = report.pop("log")
        counts = count(log, tickets)
        report["counts"] = counts.as_json()
        report["run"] = run
        report["tickets"] = tickets
        log_path = output.with_suffix(".log.jsonl")
        log_path.write_text("".join(json.dumps(entry) + "\n" for entry in log))
        report["agents_log"] = str(log_path)
        output.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        self.summary(report)
        self.stdout.write(f"==> wrote {output}")
        if counts.lost_or_doubled:
            raise CommandError(f"{counts.lost_or_doubled} writes lost or doubled (see {output})")

    def setup(self, *, run: str, agents: int, budget: int) -> tuple[list[str], list[str]]:
        Group.objects.get_or_create(name=AGENT)
        klass, _ = TicketClass.objects.get_or_create(
            slug=f"load-faults-{run}",
            defaults={
                "token_budget": budget,
                "compaction_threshold": 0.6,
                "keep_recent_tokens": budget // 8,
                "summarizer_backend": "openai",
                "summarizer_model": "hanging-summarizer",
            },
        )
        tokens, tickets = [], []
        for i in range(agents):
            tokens.append(create_agent(name=f"load-faults-{run}-{i}"))
            ticket = open_ticket(
                ticket_id=f"T-LF-{run}-{i}",
                order_id=f"SU-LF-{run}-{i}",
                seller_type="marketplace",
                ticket_class=klass,
            )
            tickets.append(ticket.ticket_id)
        return tokens, tickets

    def load(
        self,
        server: Gunicorn,
        tokens: list[str],
        tickets: list[str],
        rng: random.Random,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        stats = Stats()
        stop = threading.Event()
        agents = [
            Agent(index=i, ticket=ticket, client=Client(server.port, token, stats), stop=stop)
            for i, (token, ticket) in enumerate(zip(tokens, tickets, strict=True))
        ]
        threads = [threading.Thread(target=a.run, name=f"agent-{a.index}", daemon=True) for a in agents]
        started = time.monotonic()
        started_at = datetime.now(UTC)
        for thread in threads:
            thread.start()
        faults: list[dict[str, Any]] = []
        # The master's faults in turn, one every --master-every seconds: HUP, restart, HUP, restart, ...
        master_faults = ["hup", "restart"]
        next_master = started + options["master_every"]
        next_fault = started + options["fault_every"]
        next_progress = started + PROGRESS_EVERY
        while (now := time.monotonic()) - started < options["seconds"]:
            if now >= next_fault:
                master = None
                if now >= next_master:
                    master = master_faults[sum(f["kind"].startswith("master_") for f in faults) % 2]
                    next_master = now + options["master_every"]
                faults.append(self.fault(server, rng, master, now - started))
                next_fault = time.monotonic() + options["fault_every"]
            if now >= next_progress:
                self.progress(now - started, agents, stats, faults)
                next_progress = now + PROGRESS_EVERY
            time.sleep(0.1)
        stop.set()
        self.stdout.write("==> stopping the agents (each finishes its round, retrying until answered)")
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        self.progress(elapsed, agents, stats, faults)
        return {
            "date": started_at.isoformat(timespec="seconds"),
            "commit": git_commit(),
            "seconds": round(elapsed, 1),
            "agents": len(agents),
            "workers": server.workers,
            "rounds": sum(a.rounds for a in agents),
            "requests": stats.requests,
            "retries": stats.retries,
            "answers": {str(k): v for k, v in sorted(stats.answers.items())},
            "transport_errors": dict(stats.transport_errors),
            "faults": dict(Counter(f["kind"] for f in faults)),
            "fault_log": faults,
            "agent_failures": [f for a in agents for f in a.failures][:50],
            "log": [w.as_json() for a in agents for w in a.log],
        }

    def fault(self, server: Gunicorn, rng: random.Random, master: str | None, at: float) -> dict[str, Any]:
        """`master` ("hup" or "restart") when the master's turn has come; otherwise a random worker killed."""
        if master == "restart":
            old = server.master
            server.restart()
            return {"at": round(at, 1), "kind": "master_restarted", "old": old, "new": server.master}
        if master == "hup":
            server.hup()
            return {"at": round(at, 1), "kind": "master_hup", "pid": server.master}
        workers = server.worker_pids()
        if not workers:
            return {"at": round(at, 1), "kind": "no_worker_to_kill"}
        pid = rng.choice(workers)
        killed = server.kill_worker(pid)
        return {"at": round(at, 1), "kind": "worker_killed" if killed else "worker_gone", "pid": pid}

    def progress(self, at: float, agents: list[Agent], stats: Stats, faults: list[dict[str, Any]]) -> None:
        kinds = Counter(f["kind"] for f in faults)
        self.stdout.write(
            f"  {at:5.0f}s  rounds {sum(a.rounds for a in agents):5d}  requests {stats.requests:6d}  "
            f"retries {stats.retries:5d}  5xx {sum(n for s, n in stats.answers.items() if s >= 500):4d}  "
            f"dropped {sum(stats.transport_errors.values()):4d}  faults: {kinds.get('worker_killed', 0)} kills, "
            f"{kinds.get('master_hup', 0)} HUPs, {kinds.get('master_restarted', 0)} restarts"
        )

    def summary(self, report: dict[str, Any]) -> None:
        counts = report["counts"]
        self.stdout.write(
            f"==> {report['agents']} agents, {report['seconds']}s, {report['requests']} requests "
            f"({report['retries']} retries), answers {report['answers']}, faults {report['faults']}, "
            f"summarizer {report['summarizer']}"
        )
        for name in ("turns", "state_changes", "actions"):
            t = counts[name]
            self.stdout.write(
                f"    {name:13s} acknowledged {t['acked']:5d}  lost {t['lost']}  doubled {t['doubled']}  "
                f"unexpected {t['unexpected']}  (given up: {t['unacked_present']} recorded, "
                f"{t['unacked_absent']} not)"
            )
        self.stdout.write(
            f"    settles lost {counts['settles_lost']}, intents left unsettled {counts['intents_unsettled']}, "
            f"actions doubled by item {counts['actions_doubled_by_item']}; compactions {counts['compactions']}"
        )
        if report["agent_failures"]:
            self.stdout.write(
                f"    agent failures ({len(report['agent_failures'])}): {report['agent_failures'][:5]}"
            )
        self.stdout.write(f"==> lost or doubled: {counts['lost_or_doubled']}")


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()
