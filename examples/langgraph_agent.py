"""A support agent built with LangChain v1's `create_agent` (a LangGraph graph) whose memory and guard is a
Sundry Desk ticket (`pip install "./clients/python[langchain]" langchain-openai`).

    python examples/loopback_model.py --port 8260 &     # or any OpenAI-compatible server / OPENAI_API_KEY
    export OPENAI_BASE_URL=http://127.0.0.1:8260/v1 OPENAI_API_KEY=sk-loopback
    export SUNDRY_DESK_URL=http://127.0.0.1:8000 SUNDRY_DESK_TOKEN=<token>   # manage.py create_agent NAME
    python examples/langgraph_agent.py T-50002 "My garden table arrived scratched; can I get a refund?"

The thread id is the ticket id: each run sends only the new message, and DeskMiddleware gives the model
the desk's assembled context. `issue_refund` is reserved with the desk before it runs; a second refund of
the garden table is refused and the model is told which earlier action refused it.
"""

from __future__ import annotations

import json
import os
import sys

from model_check import model_base_url_or_exit

INSTRUCTIONS = (
    "You are Sundry's support agent. The pinned ticket state is authoritative: read refunded_cents_total and "
    "actions_taken before any refund. If a tool answers that it was refused, tell the customer what was done."
)


def main(ticket_id: str, message: str) -> None:
    base_url = model_base_url_or_exit("langgraph_agent")  # before anything is opened at the desk
    if not os.environ.get("SUNDRY_DESK_TOKEN"):
        sys.exit("langgraph_agent: set SUNDRY_DESK_TOKEN (python manage.py create_agent NAME prints one)")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from sundry_desk_client import DeskClient, NotFound
    from sundry_desk_client.langchain import DeskMiddleware

    @tool
    def issue_refund(order: str, item: str, amount_cents: int, reason: str = "") -> str:
        """Refund part of an order to the original payment method (amount in cents)."""
        # Your payment provider goes here; this example only pretends.
        return json.dumps({"status": "succeeded", "order": order, "item": item, "amount_cents": amount_cents})

    @tool
    def track_parcel(order: str, item: str) -> str:
        """Track the parcel of an order's item."""
        return json.dumps({"carrier": "Parcelink", "order": order, "item": item, "status": "in transit"})

    url = os.environ.get("SUNDRY_DESK_URL", "http://127.0.0.1:8000")
    with DeskClient(url, os.environ.get("SUNDRY_DESK_TOKEN", "")) as desk:
        try:
            desk.get_ticket(ticket_id)
        except NotFound:
            desk.open_ticket(
                ticket_id, order_id="SU-87310", seller_type="marketplace", ticket_class="standard-8k"
            )
        model = ChatOpenAI(
            model=os.environ.get("SUNDRY_AGENT_MODEL", "gpt-4.1-mini"), base_url=base_url, max_retries=1
        )
        middleware = DeskMiddleware(desk)
        agent = create_agent(
            model, tools=[issue_refund, track_parcel], system_prompt=INSTRUCTIONS, middleware=[middleware]
        )
        result = agent.invoke(
            {"messages": [HumanMessage(message)]}, {"configurable": {"thread_id": ticket_id}}
        )
        print(result["messages"][-1].content)
        for answer in middleware.turn_answers:
            print(
                f"  turn {answer.turn}: {answer.context_tokens} tokens, compaction {answer.compaction.status}"
            )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
