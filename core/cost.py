"""What a compaction cost and what it saved, from the events' recorded usage and the ticket's later turns.

Per compaction: the summarizer's tokens, latency and cost (the server's usage at the class's summarizer
prices, as the event recorded them); the tokens each later working request no longer re-sends
(`tokens_before - tokens_after`) times the working requests that came after it (each agent message and
each tool call is one call of the working model), priced at the class's working input price; and the
ratio of the compaction's cost to one working turn: the request it shrank, read at the working input price,
plus an average agent reply at the working output price (the seed's "roughly a twentieth").

Plain functions over plain data: no database here. The eval (`evals.results`), the ticket page's cost card
and the metrics page's per-class rows all compute with these, so their figures agree.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

MILLION = Decimal(1_000_000)
WORKING_ROLES = ("agent", "tool_call")


@dataclass(frozen=True)
class Prices:
    working_input: Decimal
    working_output: Decimal


@dataclass(frozen=True)
class CompactionCost:
    number: int
    at_turn: int
    input_tokens: int
    output_tokens: int
    latency_ms: int
    cost_usd: Decimal
    tokens_saved_per_request: int
    later_working_requests: int
    working_turn_usd: Decimal

    @property
    def tokens_not_resent(self) -> int:
        return self.tokens_saved_per_request * self.later_working_requests

    def savings_usd(self, prices: Prices) -> Decimal:
        return Decimal(self.tokens_not_resent) * prices.working_input / MILLION

    @property
    def compaction_to_turn_ratio(self) -> float | None:
        if not self.working_turn_usd:
            return None
        return round(float(self.cost_usd / self.working_turn_usd), 4)


@dataclass
class TicketCost:
    prices: Prices
    compactions: list[CompactionCost] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            **summed(self.compactions, self.prices),
            "compactions": [
                {
                    "number": c.number,
                    "at_turn": c.at_turn,
                    "summarizer_input_tokens": c.input_tokens,
                    "summarizer_output_tokens": c.output_tokens,
                    "summarizer_latency_ms": c.latency_ms,
                    "summarizer_cost_usd": str(c.cost_usd),
                    "tokens_saved_per_request": c.tokens_saved_per_request,
                    "later_working_requests": c.later_working_requests,
                    "tokens_not_resent": c.tokens_not_resent,
                    "savings_usd": str(c.savings_usd(self.prices).quantize(Decimal("0.000001"))),
                    "working_turn_usd": str(c.working_turn_usd.quantize(Decimal("0.000001"))),
                    "compaction_to_turn_ratio": c.compaction_to_turn_ratio,
                }
                for c in self.compactions
            ],
        }


@dataclass(frozen=True)
class CostSummary:
    """The sums a page shows: what the compactions cost, the tokens not re-sent and what that saved, and
    one compaction against one working turn (the mean ratio; None when no working turn has a price)."""

    compactions: int
    cost_usd: Decimal
    tokens_not_resent: int
    savings_usd: Decimal
    compaction_to_turn_ratio: float | None

    @property
    def net_savings_usd(self) -> Decimal:
        return self.savings_usd - self.cost_usd


def rounded_ratio(value: Decimal) -> float:
    """A ratio to four places, half to even (as `round` does), from its exact decimal value."""
    return float(value.quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN))


def mean_ratio(ratios: Iterable[float]) -> float | None:
    """The mean of the compactions' ratios (each to four places), to four places: summed as decimals, so the
    figure does not hang on the order floats were added in, and an AVG of the same values in the database
    (`compaction.costs.ticket_savings`) rounds to the same figure. None without a ratio."""
    values = [Decimal(str(r)) for r in ratios]
    return rounded_ratio(sum(values, Decimal(0)) / len(values)) if values else None


def summary_of(compactions: Iterable[CompactionCost], prices: Prices) -> CostSummary:
    items = list(compactions)
    ratios = [r for c in items if (r := c.compaction_to_turn_ratio) is not None]
    return CostSummary(
        compactions=len(items),
        cost_usd=sum((c.cost_usd for c in items), Decimal(0)),
        tokens_not_resent=sum(c.tokens_not_resent for c in items),
        savings_usd=sum((c.savings_usd(prices) for c in items), Decimal(0)),
        compaction_to_turn_ratio=mean_ratio(ratios),
    )


def summed(compactions: Iterable[CompactionCost], prices: Prices | None) -> dict[str, Any]:
    items = list(compactions)
    cost = sum((c.cost_usd for c in items), Decimal(0))
    savings = sum((c.savings_usd(prices) for c in items), Decimal(0)) if prices else Decimal(0)
    ratios = [r for c in items if (r := c.compaction_to_turn_ratio) is not None]
    return {
        "compactions": len(items),
        "summarizer_input_tokens": sum(c.input_tokens for c in items),
        "summarizer_output_tokens": sum(c.output_tokens for c in items),
        "summarizer_latency_ms": sum(c.latency_ms for c in items),
        "summarizer_cost_usd": str(cost),
        "tokens_not_resent": sum(c.tokens_not_resent for c in items),
        "savings_usd": str(savings.quantize(Decimal("0.000001"))),
        "net_savings_usd": str((savings - cost).quantize(Decimal("0.000001"))),
        # The mean over the compactions: one compaction's cost over one working turn's.
        "compaction_to_turn_ratio": mean_ratio(ratios),
    }


def ticket_cost(
    *,
    events: Iterable[dict[str, Any]],
    turns: list[tuple[int, str, int]],
    prices: Prices,
) -> TicketCost:
    """`events`: the replacing compactions (number, at_turn, tokens_before, tokens_after, the summarizer's
    input/output tokens, latency_ms, cost_usd); `turns`: (number, role, tokens) of every turn."""
    replies = [tokens for _, role, tokens in turns if role == "agent"]
    reply_tokens = Decimal(sum(replies)) / len(replies) if replies else Decimal(0)
    working = sorted(number for number, role, _ in turns if role in WORKING_ROLES)
    out = TicketCost(prices=prices)
    for event in events:
        # The working requests after the compaction's turn (a bisection: a ticket of 50,000 turns and 7,000
        # compactions is read once, not once per compaction).
        later = len(working) - bisect_right(working, int(event["at_turn"]))
        out.compactions.append(
            compaction_cost(event, later_working_requests=later, reply_tokens=reply_tokens, prices=prices)
        )
    return out


def compaction_cost(
    event: dict[str, Any], *, later_working_requests: int, reply_tokens: Decimal, prices: Prices
) -> CompactionCost:
    """One replacing compaction's figures (the keys `ticket_cost` documents), given how many working requests
    came after it and the ticket's average agent reply in tokens (a page reads both from the database)."""
    before = int(event["tokens_before"])
    after = int(event["tokens_after"] or before)
    working_turn = (Decimal(before) * prices.working_input + reply_tokens * prices.working_output) / MILLION
    return CompactionCost(
        number=int(event["number"]),
        at_turn=int(event["at_turn"]),
        input_tokens=int(event["summarizer_input_tokens"]),
        output_tokens=int(event["summarizer_output_tokens"]),
        latency_ms=int(event["latency_ms"]),
        cost_usd=Decimal(event["cost_usd"]),
        tokens_saved_per_request=max(0, before - after),
        later_working_requests=int(later_working_requests),
        working_turn_usd=working_turn,
    )
