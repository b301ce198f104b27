"""The real LangChain v1 agent (a LangGraph graph from `create_agent`) with DeskMiddleware, a scripted
OpenAI-compatible model on loopback and a live desk: T-40118.

The model asks for the $40 garden-table refund, then, turns later, asks again: the refund tool runs once, the
model reads the refusal naming the earlier action, and the desk's history shows it. A long conversation
compacts in the desk while the agent keeps answering from the desk's context.
"""

from __future__ import annotations

import json
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from sundry_desk_client import AsyncDeskClient, DeskClient
from sundry_desk_client.langchain import DeskMiddleware

from tests.clients.conftest import open_t40118, run_async
from tests.clients.model_server import ScriptedModel, call, say, scripted_model
from tickets.models import PinnedState, RefusedAttempt, TicketClass, Turn

INSTRUCTIONS = (
    "You are Sundry's support agent. Pinned ticket state is authoritative: read refunded_cents_total and "
    "actions_taken before any refund."
)
REFUND_ARGS = {"order": "SU-87310", "item": "garden-table", "amount_cents": 4000, "reason": "cosmetic damage"}


class Payments:
    def __init__(self) -> None:
        self.refunds: list[tuple[str, str, int]] = []

    def tools(self) -> list[Any]:
        payments = self

        @tool
        def issue_refund(order: str, item: str, amount_cents: int, reason: str = "") -> str:
            """Refund part of an order to the original payment method (amount in cents)."""
            payments.refunds.append((order, item, amount_cents))
            return json.dumps({"status": "succeeded", "refund_id": f"rf_{5520 + len(payments.refunds)}"})

        return [issue_refund, track_parcel]


@tool
def track_parcel(order: str, item: str) -> str:
    """Track the parcel of an order's item."""
    scans = [
        {"facility": f"Leeds sorting hub {n}", "scan": "in transit", "detail": "seal intact; weight 9.0 kg"}
        for n in range(1, 5)
    ]
    return json.dumps({"carrier": "Parcelink", "order": order, "item": item, "events": scans})


def chat_model(model: ScriptedModel) -> ChatOpenAI:
    return ChatOpenAI(model="scripted-gpt", base_url=model.base_url, api_key="sk-loopback", max_retries=0)


def test_t40118_the_second_refund_never_runs_the_model_reads_the_refusal_and_the_history_has_it(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    payments = Payments()
    script = [
        say("Since you're keeping the table, I can refund $40 for the scratched leg. Shall I go ahead?"),
        call("issue_refund", REFUND_ARGS, "call_1"),
        say("Done: a $40 refund for the garden table is on its way."),
        call("track_parcel", {"order": "SU-87311", "item": "patio-parasol"}, "call_2"),
        say("The parasol is in transit at the Leeds hub."),
        # the model asks again (reusing a call id, as some servers do)
        call("issue_refund", {**REFUND_ARGS, "reason": "scratched leg"}, "call_1"),
        say("I see the $40 refund for the garden table was already issued; nothing more to refund."),
    ]
    customer = [
        "Hi, my order SU-87310 came yesterday. The garden table has a long scratch down one leg. I'll keep it.",
        "Yes, $40 is fair. Please do.",
        "Thanks. The matching parasol still hasn't arrived.",
        "Also, can I get the refund for the scratched table leg?",
    ]
    with scripted_model(script) as model:
        middleware = DeskMiddleware(client)
        agent = create_agent(
            chat_model(model), tools=payments.tools(), system_prompt=INSTRUCTIONS, middleware=[middleware]
        )
        finals = []
        for text in customer:
            result = agent.invoke(
                {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": ticket_id}}
            )
            finals.append(result["messages"][-1].content)

    assert payments.refunds == [("SU-87310", "garden-table", 4000)]  # executed once
    assert finals[-1].startswith("I see the $40 refund")
    # The refusal reached the model as the tool's result, naming the earlier action.
    refusal = json.loads(model.tool_messages(-1)[-1]["content"])
    assert refusal["refused"] is True and refusal["error"] == "repeat_refused"
    assert (
        refusal["earlier_action"]["item"] == "garden-table"
        and refusal["earlier_action"]["amount_cents"] == 4000
    )
    assert refusal["earlier_action"]["id"] in refusal["note"]
    # Each model call was built from the desk's context: instructions, pinned state, then the ticket's turns
    # (earlier runs included, though each invoke passed only the new customer message).
    last = model.messages(-1)
    assert last[0] == {"role": "system", "content": INSTRUCTIONS}
    assert last[1]["role"] == "system" and last[1]["content"].startswith("Pinned ticket state")
    assert '"refunded_cents_total":4000' in last[1]["content"]
    assert [m["content"] for m in last if m["role"] == "user"] == customer
    # The desk's record: the pinned state, the turns with the refusal, the refused attempt kept.
    state = PinnedState.objects.get(ticket__ticket_id=ticket_id)
    assert state.items.refunded_cents_total == 4000
    assert [(a.tool, a.item, a.status) for a in state.items.actions_taken] == [
        ("issue_refund", "garden-table", "succeeded")
    ]
    turns = list(Turn.objects.filter(ticket__ticket_id=ticket_id).order_by("number"))
    assert [t.role for t in turns].count("customer") == len(customer)
    assert turns[-1].role == "agent" and turns[-1].boundary == "reply_sent"  # posted when the agent finished
    results = [t.content for t in turns if t.role == "tool_result" and t.tool == "issue_refund"]
    assert len(results) == 2 and "repeat_refused" in results[1]
    assert RefusedAttempt.objects.filter(ticket__ticket_id=ticket_id).count() == 1
    entries = list(client.iter_history(ticket_id))
    assert any(e.kind == "refused_attempt" and "garden-table" in e.text() for e in entries), [
        e.kind for e in entries
    ]


def test_posting_is_idempotent_when_a_message_is_seen_twice(
    client: DeskClient, standard_class: TicketClass
) -> None:
    """A re-run graph step posts the same messages again: the desk answers from its record."""
    ticket_id = open_t40118(client)
    with scripted_model([say("Hello!"), say("Hello again!")]) as model:
        agent = create_agent(
            chat_model(model), tools=[], middleware=[DeskMiddleware(client, ticket_id=ticket_id)]
        )
        first = HumanMessage("Hi", id="msg-1")
        agent.invoke({"messages": [first]})
        agent.invoke({"messages": [first, HumanMessage("Still there?", id="msg-2")]})
    customers = Turn.objects.filter(ticket__ticket_id=ticket_id, role="customer").values_list(
        "content", flat=True
    )
    assert list(customers) == ["Hi", "Still there?"]


def test_a_long_conversation_compacts_in_the_desk_while_the_agent_keeps_working(
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

    async def conversation(model: ScriptedModel) -> tuple[list[str], DeskMiddleware]:
        async with AsyncDeskClient(desk_url, desk_token) as desk:
            middleware = DeskMiddleware(desk)
            agent = create_agent(
                chat_model(model), tools=[track_parcel], system_prompt=INSTRUCTIONS, middleware=[middleware]
            )
            config = {"configurable": {"thread_id": ticket_id}}
            finals = []
            for day in range(days):
                result = await agent.ainvoke(
                    {"messages": [HumanMessage(f"Day {day}: where is my parasol?")]}, config
                )
                finals.append(result["messages"][-1].content)
            result = await agent.ainvoke(
                {"messages": [HumanMessage("Summing up: what happened with my order?")]}, config
            )
            finals.append(result["messages"][-1].content)
            return finals, middleware

    with scripted_model(script) as model:
        finals, middleware = run_async(conversation(model))

    assert finals[-1] == "Your $40 refund stands and the parasol is on its way."
    assert finals[:days] == [
        f"Day {d}: the parasol is still in transit at the Leeds hub." for d in range(days)
    ]
    events = client.compactions(ticket_id)
    assert [e.status for e in events if e.status in ("applied", "forced")], [e.status for e in events]
    assert any(a.compaction.status in ("applied", "forced", "queued") for a in middleware.turn_answers)
    ticket = client.get_ticket(ticket_id)
    assert ticket.first_active_turn > 1 and ticket.tokens.total <= ticket.token_budget
    last = model.messages(-1)
    assert last[0] == {"role": "system", "content": INSTRUCTIONS}
    assert last[1]["content"].startswith("Pinned ticket state")
    assert last[2]["role"] == "system" and last[2]["content"].startswith("Summary of turns 1-")
    sent_call_ids = [c["id"].split("~")[0] for m in last for c in m.get("tool_calls") or []]
    assert "call_0" not in sent_call_ids  # the first days' exchanges are in the summary, no longer sent
    assert last[-1] == {"role": "user", "content": "Summing up: what happened with my order?"}
    assert len(last) < Turn.objects.filter(ticket__ticket_id=ticket_id).count()


def test_an_identical_second_refund_with_a_reused_call_id_meets_the_guard_not_a_replay(
    client: DeskClient, standard_class: TicketClass
) -> None:
    """Same tool, same arguments, same call id (a server that numbers calls per response): still refused."""
    ticket_id = open_t40118(client)
    payments = Payments()
    script = [
        call("issue_refund", REFUND_ARGS, "call_1"),
        say("Refunded."),
        call("issue_refund", REFUND_ARGS, "call_1"),
        say("Already refunded."),
    ]
    with scripted_model(script) as model:
        agent = create_agent(chat_model(model), tools=payments.tools(), middleware=[DeskMiddleware(client)])
        config = {"configurable": {"thread_id": ticket_id}}
        agent.invoke({"messages": [HumanMessage("Refund the $40 for the table leg, please.")]}, config)
        agent.invoke({"messages": [HumanMessage("Refund the $40 for the table leg, please.")]}, config)
    assert payments.refunds == [("SU-87310", "garden-table", 4000)]
    assert json.loads(model.tool_messages(-1)[-1]["content"])["error"] == "repeat_refused"
    assert (
        list(
            Turn.objects.filter(ticket__ticket_id=ticket_id, role="customer").values_list(
                "content", flat=True
            )
        )
        == ["Refund the $40 for the table leg, please."] * 2
    )
