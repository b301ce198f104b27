"""A support agent on the OpenAI Agents SDK whose memory is a Sundry Desk ticket.

    python manage.py create_agent support-bot          # prints the agent's token as its last line
    export SUNDRY_DESK_URL=http://127.0.0.1:8000 SUNDRY_DESK_TOKEN=<token>
    python examples/loopback_model.py --port 8260 &     # an offline model; or OPENAI_API_KEY=... for OpenAI
    export OPENAI_BASE_URL=http://127.0.0.1:8260/v1 OPENAI_API_KEY=sk-loopback
    python examples/support_agent.py T-50001 "My garden table arrived with a scratched leg."

With OPENAI_BASE_URL set the agent speaks Chat Completions (what most compatible servers offer;
SUNDRY_AGENT_API=responses to override). Without a reachable model it stops with one line before it opens
a ticket or stores a turn.

The session is the ticket: every message, tool call and tool result becomes a desk turn, and every run
starts from the desk's assembled context (pinned state, the reviewed summary, the turns since), so the
desk compacts the conversation, not the agent. `issue_refund` is guarded: the desk reserves the refund
before the money moves and refuses a second refund of the same item, naming the first.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agents import Agent, Runner, function_tool, set_default_openai_api
from model_check import model_base_url_or_exit
from sundry_desk_client import AsyncDeskClient, NotFound
from sundry_desk_client.agents import DeskSession, guarded

INSTRUCTIONS = (
    "You are Sundry's support agent. Resolve the buyer's issue under the returns and damage policy. "
    "The pinned ticket state is authoritative: read refunded_cents_total and actions_taken before any refund. "
    "If a tool answers that it was refused, tell the customer what was already done."
)


def issue_refund(order: str, item: str, amount_cents: int, reason: str) -> str:
    """Refund part of an order to the original payment method.

    Args:
        order: The order id, e.g. SU-87310.
        item: The item refunded, e.g. garden-table.
        amount_cents: The amount in cents.
        reason: Why, in a few words.
    """
    # Your payment provider goes here; this example only pretends.
    return json.dumps({"status": "succeeded", "order": order, "item": item, "amount_cents": amount_cents})


@function_tool
def track_parcel(order: str, item: str) -> str:
    """Track the parcel of an order.

    Args:
        order: The order id.
        item: The item in the parcel.
    """
    return json.dumps({"carrier": "Parcelink", "order": order, "item": item, "status": "in transit"})


async def main(ticket_id: str, message: str) -> None:
    model_base_url_or_exit("support_agent")  # before anything is opened at the desk
    if not os.environ.get("SUNDRY_DESK_TOKEN"):
        sys.exit("support_agent: set SUNDRY_DESK_TOKEN (python manage.py create_agent NAME prints one)")
    default_api = "chat_completions" if os.environ.get("OPENAI_BASE_URL") else "responses"
    if os.environ.get("SUNDRY_AGENT_API", default_api) == "chat_completions":
        set_default_openai_api("chat_completions")
    url = os.environ.get("SUNDRY_DESK_URL", "http://127.0.0.1:8000")
    async with AsyncDeskClient(url, os.environ.get("SUNDRY_DESK_TOKEN", "")) as desk:
        try:
            await desk.get_ticket(ticket_id)
        except NotFound:
            await desk.open_ticket(
                ticket_id, order_id="SU-87310", seller_type="marketplace", ticket_class="standard-8k"
            )
        agent = Agent(
            name="sundry-support",
            instructions=INSTRUCTIONS,
            model=os.environ.get("SUNDRY_AGENT_MODEL", "gpt-4.1-mini"),
            tools=[guarded(issue_refund, client=desk, ticket_id=ticket_id), track_parcel],
        )
        session = DeskSession(ticket_id, client=desk)
        result = await Runner.run(agent, message, session=session)
        print(result.final_output)
        for answer in session.turn_answers:
            print(
                f"  turn {answer.turn}: {answer.context_tokens} tokens, compaction {answer.compaction.status}"
            )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
