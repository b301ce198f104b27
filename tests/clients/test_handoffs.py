"""Handoffs between agents recorded on the ticket: the endpoint, the client, and an Agents SDK handoff run by
the real Runner against the scripted loopback model."""

from __future__ import annotations

from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI
from sundry_desk_client import DeskClient, InvalidRequest
from sundry_desk_client.agents import DeskHandoffHooks, DeskSession

from tests.clients.conftest import open_t40118, run_async
from tests.clients.model_server import ScriptedModel, call, say, scripted_model
from tickets.models import Handoff, TicketClass


def test_a_recorded_handoff_is_a_history_entry_beside_compactions(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    client.append_turn(ticket_id, role="customer", content="I want my refund.")
    entry = client.record_handoff(
        ticket_id, from_agent="triage", to_agent="refunds", given={"turns": [1, 1], "note": "refund asked"}
    )
    assert entry.kind == "handoff"
    assert entry.model_dump()["detail"] == {
        "from_agent": "triage",
        "to_agent": "refunds",
        "given": {"turns": [1, 1], "note": "refund asked"},
        "state_version": 1,
    }
    newest = client.history(ticket_id).results[0]
    assert newest.kind == "handoff" and newest.model_dump()["thread_turn"] == 1
    assert "handoff triage -> refunds at turn 1" in newest.text()


def test_a_handoff_needs_both_agents(client: DeskClient, standard_class: TicketClass) -> None:
    ticket_id = open_t40118(client)
    try:
        client.record_handoff(ticket_id, from_agent="triage", to_agent="")
    except InvalidRequest as exc:
        assert "to_agent" in str(exc.body)
    else:
        raise AssertionError("an empty to_agent was accepted")
    assert not Handoff.objects.exists()


def model_for(model: ScriptedModel) -> OpenAIChatCompletionsModel:
    openai_client = AsyncOpenAI(base_url=model.base_url, api_key="sk-loopback", max_retries=0)
    return OpenAIChatCompletionsModel(model="scripted-gpt", openai_client=openai_client)


def test_an_agents_sdk_handoff_is_recorded_by_the_session_hooks(
    client: DeskClient, standard_class: TicketClass
) -> None:
    set_tracing_disabled(True)
    ticket_id = open_t40118(client)
    script = [
        call("transfer_to_refunds", {}, "call_1"),
        say("Refunds here: I see your garden table order."),
    ]

    async def run(model: ScriptedModel) -> tuple[str, Any]:
        refunds = Agent(name="refunds", instructions="Handle refunds.", model=model_for(model))
        triage = Agent(name="triage", instructions="Route.", model=model_for(model), handoffs=[refunds])
        session = DeskSession(ticket_id, client=client)
        hooks = DeskHandoffHooks(session)
        result = await Runner.run(triage, "I want a refund for the table leg.", session=session, hooks=hooks)
        return str(result.final_output), hooks

    with scripted_model(script) as model:
        final, hooks = run_async(run(model))
    assert final == "Refunds here: I see your garden table order."
    (handoff,) = Handoff.objects.filter(ticket__ticket_id=ticket_id)
    assert (handoff.from_agent, handoff.to_agent) == ("triage", "refunds")
    assert handoff.given["source"] == "openai-agents handoff" and handoff.given["pinned_state_version"] == 1
    assert handoff.given["turns"][0] == 1
    assert [e.kind for e in hooks.recorded] == ["handoff"]
    assert any(e.kind == "handoff" for e in client.iter_history(ticket_id))
