"""examples/support_agent.py, run as a user would, against a live desk and a scripted loopback model."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from agents import set_tracing_disabled

from tests.clients.conftest import run_async
from tests.clients.model_server import call, say, scripted_model
from tickets.models import Ticket, TicketClass, Turn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_agent.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("support_agent_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_agent_opens_its_ticket_tracks_a_parcel_and_prints_the_desks_figures(
    desk_url: str,
    desk_token: str,
    standard_class: TicketClass,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    set_tracing_disabled(True)
    script = [
        call("track_parcel", {"order": "SU-87311", "item": "patio-parasol"}, "call_1"),
        say("It is in transit."),
    ]
    with scripted_model(script) as model:
        for name, value in {
            "SUNDRY_DESK_URL": desk_url,
            "SUNDRY_DESK_TOKEN": desk_token,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-loopback",
            "SUNDRY_AGENT_API": "chat_completions",
        }.items():
            monkeypatch.setenv(name, value)
        run_async(load_example().main("T-50001", "Where is my parasol?"))
    printed = capsys.readouterr().out
    assert printed.startswith("It is in transit.")
    assert "turn 4:" in printed and "compaction not_due" in printed
    assert Ticket.objects.get(ticket_id="T-50001").order_id == "SU-87310"
    roles = list(
        Turn.objects.filter(ticket__ticket_id="T-50001").order_by("number").values_list("role", flat=True)
    )
    assert roles == ["customer", "tool_call", "tool_result", "agent"]
    assert model.requests[0]["model"] == "gpt-4.1-mini"
