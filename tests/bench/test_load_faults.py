"""`manage.py load_faults` for a few seconds, and its counter shown to catch a doubled and a lost write.

The command starts gunicorn (production settings, this test's PostgreSQL database), kills its workers and HUPs its
master while two agents run; the full run (20 agents, a minute or more, the master restarted) is `make load-faults`.
"""

from __future__ import annotations

import json
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from bench.faults.counts import count, tally
from bench.faults.servers import free_port
from tickets.models import Turn


def test_tally_counts_lost_doubled_and_given_up_writes() -> None:
    """Acknowledged and absent is lost, a second copy is doubled, an unacknowledged write is reported apart,
    a retried write logged twice is one write."""
    written = [("a", True), ("b", True), ("b", True), ("c", False), ("d", False), ("e", True)]
    found = Counter({"a": 1, "b": 2, "c": 1, "z": 1})
    result = tally(written, found)
    assert result.written == 5
    assert result.acked == 3
    assert result.lost == 1  # e
    assert result.doubled == 1  # b's second copy
    assert (result.unacked_present, result.unacked_absent) == (1, 1)  # c recorded, d not
    assert result.unexpected == 1  # z


def test_tally_of_a_clean_run_is_zero() -> None:
    result = tally([("a", True), ("b", True)], Counter({"a": 1, "b": 1}))
    assert (result.lost, result.doubled, result.unexpected) == (0, 0, 0)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_load_faults_for_a_few_seconds_counts_nothing_lost_or_doubled(tmp_path: Path) -> None:
    """Two agents, a worker killed every two seconds and the master sent HUP: every acknowledged turn, state change and action is in the
    database once. Then a copied turn row is counted as doubled and a write the database lacks as lost."""
    output = tmp_path / "load_faults.json"
    out = StringIO()
    call_command(
        "load_faults",
        seconds=6,
        agents=2,
        workers=2,
        port=free_port(),
        summarizer_port=free_port(),
        fault_every=2,
        master_every=4,
        token_budget=2000,
        seed=7,
        output=str(output),
        stdout=out,
    )
    report = json.loads(output.read_text())
    counts = report["counts"]
    assert report["faults"].get("worker_killed", 0) >= 1, report["fault_log"]
    assert report["faults"].get("master_hup", 0) == 1, report["fault_log"]
    assert counts["turns"]["acked"] > 0 and counts["state_changes"]["acked"] > 0, counts
    for name in ("turns", "state_changes", "actions"):
        assert counts[name]["lost"] == 0 and counts[name]["doubled"] == 0, (name, counts[name])
    assert counts["lost_or_doubled"] == 0
    assert counts["settles_lost"] == 0
    assert "lost or doubled: 0" in out.getvalue()

    log = [json.loads(line) for line in Path(report["agents_log"]).read_text().splitlines()]
    tickets = report["tickets"]
    assert count(log, tickets).lost_or_doubled == 0

    first = Turn.objects.filter(ticket__ticket_id=tickets[0]).order_by("number").first()
    assert first is not None
    last_number = (
        Turn.objects.filter(ticket=first.ticket).order_by("-number").values_list("number", flat=True)[0]
    )
    Turn.objects.create(
        ticket=first.ticket,
        number=last_number + 1,
        role=first.role,
        content=first.content,
        tokens=first.tokens,
    )
    doubled = count(log, tickets)
    assert doubled.turns.doubled == 1
    assert doubled.lost_or_doubled == 1

    lost_turn = {"kind": "turn", "ticket": tickets[0], "marker": "[lf:never-written]", "acked": True}
    lost = count([*log, lost_turn], tickets)
    assert lost.turns.lost == 1
    assert lost.lost_or_doubled == 2
