"""AsyncDeskClient against a live desk: the same API and errors as DeskClient, with await."""

from __future__ import annotations

import pytest
from sundry_desk_client import AsyncDeskClient, NotFound, RepeatRefused

from tests.clients.conftest import run_async
from tickets.models import TicketClass


def test_the_async_client_opens_talks_changes_state_and_is_refused_a_repeat(
    desk_url: str, desk_token: str, standard_class: TicketClass
) -> None:
    async def ticket_life() -> dict:
        async with AsyncDeskClient(desk_url, desk_token, backoff=0.01) as desk:
            await desk.open_ticket("T-9", order_id="SU-9", seller_type="retail", ticket_class="standard-8k")
            await desk.append_turn("T-9", role="customer", content="No replacement please.")
            stale = (await desk.state("T-9")).version
            await desk.change_state("T-9", op="decision_made", text="offer a partial refund")
            state = await desk.change_state(
                "T-9", op="constraint_stated", text="no replacement", version=stale
            )
            await desk.record_action("T-9", tool="issue_refund", item="garden-table", amount_cents=4000)
            with pytest.raises(RepeatRefused) as refused:
                await desk.record_action("T-9", tool="issue_refund", item="garden-table", amount_cents=4000)
            with pytest.raises(NotFound):
                await desk.get_ticket("T-404")
            context = await desk.context("T-9")
            return {
                "version": state.version,
                "constraints": [c.text for c in state.customer_constraints],
                "earlier": refused.value.earlier_action["id"],
                "turns": [t.content for t in context.turns],
                "refunded": context.pinned_state.refunded_cents_total,
            }

    assert run_async(ticket_life()) == {
        "version": 3,
        "constraints": ["no replacement"],
        "earlier": "A1",
        "turns": ["No replacement please."],
        "refunded": 4000,
    }
