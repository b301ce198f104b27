"""The policy is pure: these tests need no database."""

from __future__ import annotations

from compaction.policy import TurnInfo, at_boundary, choose_cut, is_due, pair_results, waiting_on_tool


def t(number: int, role: str, tokens: int = 10, boundary: str = "", call: str = "") -> TurnInfo:
    return TurnInfo(number=number, role=role, tokens=tokens, boundary=boundary, tool_call_id=call)


def test_due_only_above_the_threshold() -> None:
    assert not is_due(6400, 6400)
    assert is_due(6401, 6400)


def test_a_tool_result_waits_for_the_agent_turn_that_consumes_it() -> None:
    turns = [t(1, "customer"), t(2, "tool_call", call="c"), t(3, "tool_result", call="c")]
    assert waiting_on_tool(turns)
    assert not at_boundary(turns)
    turns.append(t(4, "agent", boundary="reply_sent"))
    assert not waiting_on_tool(turns)
    assert at_boundary(turns)


def test_an_agent_turn_without_a_boundary_is_not_a_step_end() -> None:
    assert not at_boundary([t(1, "customer"), t(2, "agent")])
    assert not at_boundary([t(1, "customer", boundary="reply_sent")][:0])


def test_an_unanswered_tool_call_blocks_compaction_even_after_a_reply() -> None:
    turns = [t(1, "tool_call", call="c"), t(2, "agent", boundary="reply_sent")]
    assert waiting_on_tool(turns)
    assert not at_boundary(turns)


def test_cut_keeps_a_tail_of_at_most_keep_recent_tokens() -> None:
    turns = [t(i, "customer" if i % 2 else "agent", tokens=100) for i in range(1, 11)]
    cut = choose_cut(turns, keep_recent_tokens=250)
    assert cut == 8  # the last two turns (200 tokens) are kept
    assert sum(x.tokens for x in turns[cut:]) <= 250


def test_cut_never_separates_a_tool_call_from_its_result() -> None:
    turns = [
        t(1, "customer", 100),
        t(2, "tool_call", 20, call="c1"),
        t(3, "tool_result", 50, call="c1"),
        t(4, "agent", 30, boundary="reply_sent"),
    ]
    # A 90-token tail would start at the result; the cut moves past it instead.
    cut = choose_cut(turns, keep_recent_tokens=90)
    assert cut == 3
    assert [x.number for x in turns[cut:]] == [4]


def test_a_late_duplicate_result_is_an_orphan_and_does_not_move_the_cut() -> None:
    """The second c4 result answers no unanswered call: it pairs with nothing, so it constrains no cut."""
    turns = [
        t(1, "tool_call", 20, call="c4"),
        t(2, "tool_result", 2000, call="c4"),
        t(3, "agent", 40, boundary="reply_sent"),
        t(4, "tool_result", 2500, call="c4"),
        t(5, "agent", 30, boundary="reply_sent"),
    ]
    assert pair_results(turns) == {2: 1}
    cut = choose_cut(turns, keep_recent_tokens=2600)
    assert [x.number for x in turns[cut:]] == [3, 4, 5]


def test_nothing_to_replace_when_the_tail_fits_everything() -> None:
    turns = [t(1, "customer", 10), t(2, "agent", 10, boundary="reply_sent")]
    assert choose_cut(turns, keep_recent_tokens=100) == 0
