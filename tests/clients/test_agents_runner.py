"""The real OpenAI Agents SDK Runner, a scripted model on loopback, and a live desk: T-40118.

The model asks for the $40 garden-table refund; many turns later it "forgets" and asks again. The guarded
tool's side effect happens once, the model is told why the second one did not, the desk keeps the refused
attempt, and a long conversation compacts in the desk while the session keeps working.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from sundry_desk_client import AsyncDeskClient, DeskClient
from sundry_desk_client.agents import DeskSession, guarded

from tests.clients.conftest import needs_history, needs_intents, open_t40118, run_async
from tests.clients.model_server import ScriptedModel, call, say, scripted_model
from tickets.models import PinnedState, TicketClass, Turn

INSTRUCTIONS = (
    "You are Sundry's support agent. Pinned ticket state is authoritative: read refunded_cents_total and "
    "actions_taken before any refund."
)
REFUND_ARGS = {"order": "SU-87310", "item": "garden-table", "amount_cents": 4000, "reason": "cosmetic damage"}


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)


def agent_for(model: ScriptedModel, tools: list[Any]) -> Agent[Any]:
    openai_client = AsyncOpenAI(base_url=model.base_url, api_key="sk-loopback", max_retries=0)
    return Agent(
        name="sundry-support",
        instructions=INSTRUCTIONS,
        model=OpenAIChatCompletionsModel(model="scripted-gpt", openai_client=openai_client),
        tools=tools,
    )


class Payments:
    """The irreversible side effect: money leaving, counted."""

    def __init__(self) -> None:
        self.refunds: list[tuple[str, str, int]] = []

    def issue_refund(self, order: str, item: str, amount_cents: int, reason: str = "") -> str:
        """Refund part of an order to the original payment method.

        Args:
            order: The order id, e.g. SU-87310.
            item: The item refunded, e.g. garden-table.
            amount_cents: The amount in cents.
            reason: Why, in a few words.
        """
        self.refunds.append((order, item, amount_cents))
        return json.dumps(
            {
                "status": "succeeded",
                "refund_id": f"rf_{5520 + len(self.refunds)}",
                "amount_cents": amount_cents,
            }
        )


def issue_refund_tool(payments: Payments, client: Any, ticket_id: str) -> Any:
    def issue_refund(order: str, item: str, amount_cents: int, reason: str = "") -> str:
        """Refund part of an order to the original payment method.

        Args:
            order: The order id, e.g. SU-87310.
            item: The item refunded, e.g. garden-table.
            amount_cents: The amount in cents.
            reason: Why, in a few words.
        """
        return payments.issue_refund(order, item, amount_cents, reason)

    return guarded(issue_refund, client=client, ticket_id=ticket_id)


@function_tool
def track_parcel(order: str, item: str) -> str:
    """Track a parcel of an order.

    Args:
        order: The order id.
        item: The item in the parcel.
    """
    scans = [
        {"facility": f"Leeds sorting hub {n}", "scan": "in transit", "detail": "seal intact; weight 9.0 kg"}
        for n in range(1, 5)
    ]
    return json.dumps(
        {"carrier": "Parcelink", "order": order, "item": item, "status": "in transit", "events": scans}
    )


def test_guarded_keeps_the_tools_name_docstring_and_parameters(
    client: DeskClient, transactional_db: None
) -> None:
    tool = issue_refund_tool(Payments(), client, "T-40118")
    assert tool.name == "issue_refund"
    assert tool.description.startswith("Refund part of an order")
    properties = tool.params_json_schema["properties"]
    assert set(properties) == {"order", "item", "amount_cents", "reason"}
    assert properties["amount_cents"]["type"] == "integer"
    assert properties["item"]["description"] == "The item refunded, e.g. garden-table."
    assert "_desk_tool_context" not in json.dumps(tool.params_json_schema)


@needs_intents
def test_t40118_the_forgotten_second_refund_never_runs_and_the_model_is_told(
    client: DeskClient, desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    payments = Payments()
    script = [
        say("I'm sorry the table arrived damaged. Could you send a photo of the scratched leg?"),
        say("Since you're keeping the table, I can refund $40 for the scratched leg. Shall I go ahead?"),
        call("issue_refund", REFUND_ARGS, "call_1"),
        say("Done: a $40 refund for the garden table is on its way."),
        call("track_parcel", {"order": "SU-87311", "item": "patio-parasol"}, "call_2"),
        say("The parasol is in transit at the Leeds hub."),
        # The model has lost the refund from its context and asks again, reusing a call id as some servers do.
        call("issue_refund", {**REFUND_ARGS, "reason": "scratched leg"}, "call_1"),
        say("I see the $40 refund for the garden table was already issued; nothing more to refund."),
    ]
    customer = [
        "Hi, my order SU-87310 came yesterday. The garden table has a long scratch down one leg.",
        "Photo attached. I'd rather keep it. I don't want a replacement.",
        "Yes, $40 is fair. Please do.",
        "Thanks. The matching parasol still hasn't arrived.",
        "Also, can I get the refund for the scratched table leg?",
    ]

    async def conversation(model: ScriptedModel) -> list[str]:
        async with AsyncDeskClient(desk_url, desk_token) as desk:
            session = DeskSession(ticket_id, client=desk)
            agent = agent_for(model, [issue_refund_tool(payments, desk, ticket_id), track_parcel])
            outputs = []
            for text in customer:
                result = await Runner.run(agent, text, session=session)
                outputs.append(str(result.final_output))
            return outputs

    with scripted_model(script) as model:
        outputs = run_async(conversation(model))

    assert payments.refunds == [("SU-87310", "garden-table", 4000)]  # the side effect happened once
    refusal = json.loads(model.tool_messages(-1)[-1]["content"])
    assert refusal["refused"] is True and refusal["error"] == "repeat_refused"
    assert (
        refusal["earlier_action"]["item"] == "garden-table"
        and refusal["earlier_action"]["amount_cents"] == 4000
    )
    assert refusal["earlier_action"]["id"] in refusal["note"] and "did NOT run" in refusal["note"]
    assert outputs[-1].startswith("I see the $40 refund")
    state = PinnedState.objects.get(ticket__ticket_id=ticket_id)
    assert state.items.refunded_cents_total == 4000
    assert [(a.tool, a.item, a.amount_cents) for a in state.items.actions_taken] == [
        ("issue_refund", "garden-table", 4000)
    ]
    results = list(
        Turn.objects.filter(ticket__ticket_id=ticket_id, role="tool_result", tool="issue_refund").values_list(
            "content", flat=True
        )
    )
    assert (
        len(results) == 2 and "repeat_refused" in results[1]
    )  # the desk's record has the refusal the model saw


@needs_intents
@needs_history
def test_t40118_the_refused_attempt_is_in_the_desks_history(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    payments = Payments()
    script = [
        call("issue_refund", REFUND_ARGS, "call_1"),
        say("Refunded."),
        call("issue_refund", REFUND_ARGS, "call_9"),
        say("Already done."),
    ]

    async def two_asks(model: ScriptedModel) -> None:
        session = DeskSession(ticket_id, client=client)  # the blocking client works too
        agent = agent_for(model, [issue_refund_tool(payments, client, ticket_id)])
        await Runner.run(agent, "Please refund the $40 for the table leg.", session=session)
        await Runner.run(agent, "Did you refund the table leg?", session=session)

    with scripted_model(script) as model:
        run_async(two_asks(model))

    assert len(payments.refunds) == 1
    entries = list(client.iter_history(ticket_id))
    refused = [e for e in entries if "refus" in e.text() and "garden-table" in e.text()]
    assert refused, [e.model_dump() for e in entries]
    assert entries.index(refused[0]) < next(
        i for i, e in enumerate(entries) if e.kind != "refused_attempt" and "intended" in e.text()
    )  # newest first: the refusal comes before the first intent it refused


@needs_intents
def test_a_refund_tool_that_raises_settles_its_intent_failed_and_a_retry_may_run(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    attempts: list[int] = []

    def issue_refund(order: str, item: str, amount_cents: int) -> str:
        """Refund part of an order."""
        attempts.append(amount_cents)
        if len(attempts) == 1:
            raise ConnectionError("payment provider timed out")
        return "refunded"

    args = {"order": "SU-87310", "item": "garden-table", "amount_cents": 4000}
    script = [
        call("issue_refund", args, "call_1"),
        call("issue_refund", args, "call_2"),
        say("Refunded now."),
    ]

    async def run(model: ScriptedModel) -> str:
        agent = agent_for(model, [guarded(issue_refund, client=client, ticket_id=ticket_id)])
        result = await Runner.run(
            agent, "Refund the $40 please.", session=DeskSession(ticket_id, client=client)
        )
        return str(result.final_output)

    with scripted_model(script) as model:
        final = run_async(run(model))
    assert attempts == [4000, 4000] and final == "Refunded now."
    assert model.tool_messages(1)[0]["content"].startswith("An error occurred")  # the SDK's own words
    state = client.state(ticket_id)
    assert [(a.status, a.amount_cents) for a in state.actions_taken] == [
        ("failed", 4000),
        ("succeeded", 4000),
    ]
    assert state.refunded_cents_total == 4000


def test_a_refund_the_desk_cannot_reserve_does_not_run_and_the_model_gets_the_desks_message(
    client: DeskClient, standard_class: TicketClass
) -> None:
    """A reservation the desk answers 400 (a negative amount) raises before the side effect."""
    ticket_id = open_t40118(client)
    payments = Payments()
    script = [
        call("issue_refund", {**REFUND_ARGS, "amount_cents": -4000}, "call_1"),
        say("Sorry, I could not refund that."),
    ]

    async def run(model: ScriptedModel) -> str:
        agent = agent_for(model, [issue_refund_tool(payments, client, ticket_id)])
        result = await Runner.run(agent, "Refund me!", session=DeskSession(ticket_id, client=client))
        return str(result.final_output)

    with scripted_model(script) as model:
        final = run_async(run(model))
    assert payments.refunds == [] and final == "Sorry, I could not refund that."
    told = json.loads(model.tool_messages(1)[0]["content"])
    assert told["status"] == 400 and "amount_cents" in told["message"] and "did NOT run" in told["note"]
    assert PinnedState.objects.get(ticket__ticket_id=ticket_id).items.actions_taken == []


def test_a_long_conversation_compacts_in_the_desk_while_the_runner_keeps_going(
    client: DeskClient, desk_url: str, desk_token: str, small_class: TicketClass
) -> None:
    ticket_id = open_t40118(client, ticket_class="small-1k")
    days = 6
    script = []
    for day in range(days):
        script += [
            call("track_parcel", {"order": "SU-87311", "item": "patio-parasol"}, f"call_{day}"),
            say(f"Day {day}: the parasol is still in transit at the Leeds hub."),
        ]
    script.append(say("Your $40 refund stands and the parasol is on its way."))

    async def conversation(model: ScriptedModel) -> tuple[list[str], list[Any]]:
        async with AsyncDeskClient(desk_url, desk_token) as desk:
            session = DeskSession(ticket_id, client=desk)
            agent = agent_for(model, [track_parcel])
            finals = []
            for day in range(days):
                result = await Runner.run(agent, f"Day {day}: where is my parasol?", session=session)
                finals.append(str(result.final_output))
            result = await Runner.run(agent, "Summing up: what happened with my order?", session=session)
            finals.append(str(result.final_output))
            return finals, await session.get_items()

    with scripted_model(script) as model:
        finals, items = run_async(conversation(model))

    assert finals[-1] == "Your $40 refund stands and the parasol is on its way."
    events = client.compactions(ticket_id)
    assert [e.status for e in events if e.status in ("applied", "forced")], [e.status for e in events]
    ticket = client.get_ticket(ticket_id)
    assert ticket.first_active_turn > 1 and ticket.tokens.total <= ticket.token_budget
    # The last model request was built from the desk's context: instructions, pinned state, the summary,
    # then only the turns after the cut (the first days' tool calls are no longer sent).
    last = model.messages(-1)
    assert last[0] == {"role": "system", "content": INSTRUCTIONS}
    assert last[1]["role"] == "system" and last[1]["content"].startswith("Pinned ticket state")
    assert last[2]["role"] == "system" and last[2]["content"].startswith("Summary of turns 1-")
    sent_call_ids = [c["id"].split("~")[0] for m in last for c in m.get("tool_calls") or []]
    # (the cut moves until the request fits, so on this small class the tail may be short or empty)
    assert "call_0" not in sent_call_ids
    assert last[-1] == {"role": "user", "content": "Summing up: what happened with my order?"}
    assert items[2:] and len(model.messages(-1)) < Turn.objects.filter(ticket__ticket_id=ticket_id).count()


def test_a_model_server_that_reuses_call_ids_across_runs_keeps_both_calls_in_the_history(
    client: DeskClient, standard_class: TicketClass
) -> None:
    """Some servers number calls per response (call_1 every time); the SDK merges items sharing a call id."""
    ticket_id = open_t40118(client)
    script = [
        call("track_parcel", {"order": "SU-87311", "item": "patio-parasol"}, "call_1"),
        say("It is at the Leeds hub."),
        call("track_parcel", {"order": "SU-87312", "item": "cushions"}, "call_1"),
        say("The cushions are at the Leeds hub too."),
    ]

    async def run(model: ScriptedModel) -> None:
        session = DeskSession(ticket_id, client=client)
        agent = agent_for(model, [track_parcel])
        await Runner.run(agent, "Where is the parasol?", session=session)
        await Runner.run(agent, "And the cushions?", session=session)

    with scripted_model(script) as model:
        run_async(run(model))
    last = model.messages(-1)
    calls = [c for m in last for c in m.get("tool_calls") or []]
    results = [m for m in last if m["role"] == "tool"]
    assert [json.loads(c["function"]["arguments"])["item"] for c in calls] == ["patio-parasol", "cushions"]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]
    assert [m["role"] for m in last[2:]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    stored = Turn.objects.filter(ticket__ticket_id=ticket_id, role="tool_call").values_list(
        "tool_call_id", flat=True
    )
    assert list(stored) == ["call_1", "call_1"]


@needs_intents
def test_a_guarded_tool_sends_the_belief_of_the_context_and_a_refund_in_other_words_does_not_run(
    client: DeskClient, standard_class: TicketClass
) -> None:
    """The model was given a state with nothing refunded; it refunds the table, then (in other words) the
    scratched leg: the belief it was given is stale, so the second refund does not run."""
    ticket_id = open_t40118(client)
    payments = Payments()
    script = [
        call("issue_refund", REFUND_ARGS, "call_1"),
        call("issue_refund", {**REFUND_ARGS, "item": "scratched leg"}, "call_2"),
        say("The table was refunded."),
    ]

    async def run(model: ScriptedModel) -> str:
        session = DeskSession(ticket_id, client=client)

        def issue_refund(order: str, item: str, amount_cents: int, reason: str = "") -> str:
            """Refund part of an order."""
            return payments.issue_refund(order, item, amount_cents, reason)

        tool = guarded(issue_refund, client=client, ticket_id=ticket_id, expects=session.belief)
        result = await Runner.run(agent_for(model, [tool]), "Refund the damage please.", session=session)
        return str(result.final_output)

    with scripted_model(script) as model:
        final = run_async(run(model))
    assert payments.refunds == [("SU-87310", "garden-table", 4000)] and final == "The table was refunded."
    told = json.loads(model.tool_messages(2)[-1]["content"])
    assert told["error"] == "belief_stale" and "did NOT run" in told["note"]
    assert told["actions"][0]["item"] == "garden-table"
