"""The README's agent loop, extracted from the README and run with bash against a live desk, as a reader
would paste it (its own ticket, the turn numbers the desk answered)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from tickets.models import PinnedState, RefusedAttempt, Ticket, TicketClass, Turn

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_loop() -> str:
    text = README.read_text()
    section = text[text.index("### An agent's loop") :]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, "the README's agent loop is a ```sh block"
    return match.group(1)


def test_the_readmes_shell_loop_runs_as_pasted(
    desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    env = {**os.environ, "TOKEN": desk_token, "PORT": str(urlsplit(desk_url).port)}
    finished = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", readme_loop()],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 0, finished.stderr + finished.stdout
    assert "error" not in finished.stderr.lower(), finished.stderr
    assert '"repeat_refused"' in finished.stdout and '"op"' not in finished.stdout
    (ticket,) = Ticket.objects.filter(ticket_id__startswith="T-")
    assert list(Turn.objects.filter(ticket=ticket).order_by("number").values_list("role", flat=True)) == [
        "customer",
        "tool_call",
    ]
    state = PinnedState.objects.get(ticket=ticket).items
    assert [(a.status, a.at_turn) for a in state.actions_taken] == [("succeeded", 2)]
    assert [c.text for c in state.customer_constraints] == ["no replacement wanted"]
    assert RefusedAttempt.objects.filter(ticket=ticket).count() == 1
