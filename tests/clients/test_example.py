"""examples/support_agent.py, run as a user would, against a live desk and a scripted loopback model."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import set_tracing_disabled

from tests.clients.conftest import run_async
from tests.clients.model_server import call, say, scripted_model
from tickets.models import PinnedState, RefusedAttempt, Ticket, TicketClass, Turn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_agent.py"


def load_example(path: Path = EXAMPLE) -> Any:
    """Load an example as `python examples/NAME.py` would (its folder on sys.path, for model_check)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"{path.stem}_example", path)
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


LANGGRAPH_EXAMPLE = EXAMPLE.parent / "langgraph_agent.py"
LOOPBACK_MODEL = EXAMPLE.parent / "loopback_model.py"
LOOPBACK_PORT = 8263  # this branch's port range


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("example", ["support_agent", "langgraph_agent"])
def test_without_a_reachable_model_an_example_stops_with_one_line_before_opening_anything(
    example: str, desk_url: str, desk_token: str, standard_class: TicketClass, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUNDRY_DESK_URL", desk_url)
    monkeypatch.setenv("SUNDRY_DESK_TOKEN", desk_token)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    module = load_example(EXAMPLE.parent / f"{example}.py")
    with pytest.raises(SystemExit) as stopped:
        outcome = module.main("T-50009", "Where is my parasol?")
        if hasattr(outcome, "__await__"):
            run_async(outcome)
    message = str(stopped.value.code)
    assert "\n" not in message and message.startswith(f"{example}: the model server at http://127.0.0.1:")
    assert "loopback_model.py" in message
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(SystemExit) as stopped:
        outcome = module.main("T-50009", "Where is my parasol?")
        if hasattr(outcome, "__await__"):
            run_async(outcome)
    assert str(stopped.value.code).startswith(f"{example}: no model")
    assert not Ticket.objects.filter(ticket_id="T-50009").exists()


def test_the_examples_run_offline_against_the_loopback_model_and_the_second_refund_is_refused(
    desk_url: str,
    desk_token: str,
    standard_class: TicketClass,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The documented offline command: examples/loopback_model.py, then the examples pointed at it."""
    set_tracing_disabled(True)
    server = subprocess.Popen(
        [sys.executable, str(LOOPBACK_MODEL), "--port", str(LOOPBACK_PORT)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and "loopback model on" in server.stdout.readline()
        for name, value in {
            "SUNDRY_DESK_URL": desk_url,
            "SUNDRY_DESK_TOKEN": desk_token,
            "OPENAI_BASE_URL": f"http://127.0.0.1:{LOOPBACK_PORT}/v1",
            "OPENAI_API_KEY": "sk-loopback",
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("SUNDRY_AGENT_API", raising=False)
        langgraph = load_example(LANGGRAPH_EXAMPLE)
        langgraph.main("T-50002", "My garden table arrived scratched; can I get a refund?")
        langgraph.main("T-50002", "Can I get the refund for the scratched table leg?")
        run_async(load_example().main("T-50003", "Where is my parasol?"))
    finally:
        server.terminate()
        server.wait(timeout=10)
    printed = capsys.readouterr().out
    assert "Done: a $40 refund for the garden table is on its way." in printed
    assert "already issued earlier" in printed and "Your parcel is in transit" in printed
    state = PinnedState.objects.get(ticket__ticket_id="T-50002")
    assert [(a.tool, a.status) for a in state.items.actions_taken] == [("issue_refund", "succeeded")]
    assert RefusedAttempt.objects.filter(ticket__ticket_id="T-50002").count() == 1
