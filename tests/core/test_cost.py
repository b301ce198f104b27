"""What a compaction cost and saved: summarizer usage, tokens not re-sent, one compaction against one turn."""

from __future__ import annotations

from decimal import Decimal

from core.cost import Prices, ticket_cost

PRICES = Prices(working_input=Decimal("2.00"), working_output=Decimal("8.00"))


def _event(**changes: object) -> dict[str, object]:
    event: dict[str, object] = {
        "number": 1,
        "at_turn": 4,
        "tokens_before": 5000,
        "tokens_after": 1000,
        "summarizer_input_tokens": 4800,
        "summarizer_output_tokens": 300,
        "latency_ms": 1234,
        "cost_usd": Decimal("0.000600"),
    }
    event.update(changes)
    return event


def test_tokens_not_resent_are_the_saving_per_request_times_the_later_working_requests() -> None:
    turns = [
        (1, "customer", 50),
        (2, "agent", 100),
        (3, "tool_call", 20),
        (4, "agent", 100),
        (5, "customer", 40),
        (6, "tool_call", 20),
        (7, "tool_result", 300),
        (8, "agent", 100),
    ]
    cost = ticket_cost(events=[_event()], turns=turns, prices=PRICES)
    [one] = cost.compactions
    assert one.tokens_saved_per_request == 4000
    assert one.later_working_requests == 2  # turns 6 and 8: the working model's calls after turn 4
    assert one.tokens_not_resent == 8000
    assert one.savings_usd(PRICES) == Decimal("0.016")
    # One working turn: the 5,000-token request at $2/M plus an average 100-token reply at $8/M.
    assert one.working_turn_usd == Decimal("0.0108")
    assert one.compaction_to_turn_ratio == round(0.0006 / 0.0108, 4)
    figures = cost.as_json()
    assert figures["summarizer_input_tokens"] == 4800 and figures["summarizer_latency_ms"] == 1234
    assert figures["savings_usd"] == "0.016000"
    assert figures["net_savings_usd"] == "0.015400"


def test_a_compaction_with_no_model_call_costs_nothing_and_its_ratio_is_zero() -> None:
    event = _event(summarizer_input_tokens=0, summarizer_output_tokens=0, latency_ms=0, cost_usd=Decimal(0))
    cost = ticket_cost(events=[event], turns=[(5, "agent", 10)], prices=PRICES)
    assert cost.as_json()["compaction_to_turn_ratio"] == 0
    assert cost.as_json()["tokens_not_resent"] == 4000


def test_a_pages_summary_adds_up_the_compactions_as_the_eval_does() -> None:
    from core.cost import summary_of

    turns = [(1, "customer", 50), (2, "agent", 100), (5, "agent", 300), (6, "tool_call", 20)]
    cost = ticket_cost(
        events=[_event(), _event(number=2, at_turn=5, tokens_after=4000)], turns=turns, prices=PRICES
    )
    summary = summary_of(cost.compactions, PRICES)
    figures = cost.as_json()
    assert summary.compactions == 2
    assert summary.tokens_not_resent == figures["tokens_not_resent"] == 4000 * 2 + 1000 * 1
    assert str(summary.savings_usd.quantize(Decimal("0.000001"))) == figures["savings_usd"]
    assert summary.compaction_to_turn_ratio == figures["compaction_to_turn_ratio"]
    assert summary.net_savings_usd == summary.savings_usd - Decimal("0.001200")
