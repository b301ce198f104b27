"""The policy is pure: these tests need no database."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.policy import (
    SUMMARY_ESTIMATE_TOKENS,
    CutPlan,
    Room,
    TurnInfo,
    at_boundary,
    choose_cut,
    complete_prefix,
    expected_summary_tokens,
    fit_cut,
    is_due,
    min_gain_tokens,
    pair_results,
    plan_cut,
    safe_cuts,
    waiting_on_tool,
)


def t(
    number: int, role: str, tokens: int = 10, boundary: str = "", call: str = "", tool: str = ""
) -> TurnInfo:
    return TurnInfo(number=number, role=role, tokens=tokens, boundary=boundary, tool_call_id=call, tool=tool)


def chain(pairs: int, tokens: int = 10) -> list[TurnInfo]:
    """call, result, call, result, ... with no agent text and no ids: what a busy tool loop sends."""
    turns = []
    for i in range(pairs):
        turns.append(t(2 * i + 1, "tool_call", tokens, tool="search"))
        turns.append(t(2 * i + 2, "tool_result", tokens, tool="search"))
    return turns


def keeps_pairs_whole(turns: list[TurnInfo], cut: int) -> bool:
    replaced = {x.number for x in turns[:cut]}
    return all((r in replaced) == (c in replaced) for r, c in pair_results(turns).items())


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


def test_turn_info_keeps_its_positional_fields_and_tool_defaults_to_empty() -> None:
    turn = TurnInfo(7, "tool_call", 12, "", "c1")
    assert (turn.number, turn.role, turn.tokens, turn.boundary, turn.tool_call_id, turn.tool) == (
        7,
        "tool_call",
        12,
        "",
        "c1",
        "",
    )


def test_thirty_steps_without_any_ids_reach_a_boundary() -> None:
    turns = [t(1, "customer")]
    for step in range(30):
        n = 2 + 3 * step
        turns += [t(n, "tool_call"), t(n + 1, "tool_result"), t(n + 2, "agent", boundary="reply_sent")]
        assert at_boundary(turns), f"step {step}"
    assert len(pair_results(turns)) == 30
    assert not waiting_on_tool(turns)


def test_results_without_ids_answer_parallel_calls_by_tool_name_out_of_order() -> None:
    turns = [
        t(1, "customer"),
        t(2, "tool_call", tool="search_orders"),
        t(3, "tool_call", tool="get-refund"),
        t(4, "tool_call", tool="search_orders"),
        t(5, "tool_result", tool="Get Refund"),
        t(6, "tool_result", tool="SEARCH-orders"),
        t(7, "tool_result"),  # names no tool: the oldest open call
    ]
    assert pair_results(turns) == {5: 3, 6: 2, 7: 4}
    turns.append(t(8, "agent", boundary="reply_sent"))
    assert at_boundary(turns)


def test_a_result_naming_a_tool_with_no_open_call_falls_back_to_the_oldest_open_call() -> None:
    turns = [
        t(1, "tool_call", tool="lookup"),
        t(2, "tool_call", tool="refund"),
        t(3, "tool_result", tool="ship"),
    ]
    assert pair_results(turns) == {3: 1}


def test_results_without_ids_answer_calls_that_have_ids_in_order() -> None:
    turns = [
        t(1, "tool_call", call="a"),
        t(2, "tool_call", call="b"),
        t(3, "tool_result"),
        t(4, "tool_result"),
    ]
    assert pair_results(turns) == {3: 1, 4: 2}
    assert waiting_on_tool(turns)  # the results are not consumed yet
    assert not waiting_on_tool([*turns, t(5, "agent")])


def test_an_id_reused_after_its_first_pair_closed_starts_a_new_pair() -> None:
    turns = [
        t(1, "tool_call", call="x"),
        t(2, "tool_result", call="x"),
        t(3, "agent", boundary="reply_sent"),
        t(4, "tool_call", call="x"),
    ]
    assert waiting_on_tool(turns)  # the second x call waits for its own result
    turns += [t(5, "tool_result", call="x"), t(6, "agent", boundary="reply_sent")]
    assert pair_results(turns) == {2: 1, 5: 4}
    assert at_boundary(turns)
    assert safe_cuts(turns) == [2, 3, 5, 6]


def test_an_id_reused_while_the_first_call_is_still_open_matches_the_oldest() -> None:
    turns = [t(1, "tool_call", call="x"), t(2, "tool_call", call="x"), t(3, "tool_result", call="x")]
    assert pair_results(turns) == {3: 1}
    turns.append(t(4, "tool_result", call="x"))
    assert pair_results(turns) == {3: 1, 4: 2}


def test_a_result_whose_id_matches_nothing_answers_the_oldest_open_call() -> None:
    turns = [t(1, "tool_call", call="a"), t(2, "tool_result", call="zzz")]
    assert pair_results(turns) == {2: 1}


def test_a_result_that_answers_nothing_is_an_orphan_and_constrains_no_cut() -> None:
    turns = [
        t(1, "customer"),
        t(2, "tool_result", call="ghost"),
        t(3, "agent", boundary="reply_sent"),
    ]
    assert pair_results(turns) == {}
    assert at_boundary(turns)  # the agent turn consumed it
    assert safe_cuts(turns) == [1, 2, 3]


def test_an_empty_tool_result_is_a_valid_turn() -> None:
    """Content is never read: a zero-token result pairs, is consumed, and can be cut like any other."""
    turns = [
        t(1, "customer", 100),
        t(2, "tool_call", 20, call="c"),
        t(3, "tool_result", 0, call="c"),
        t(4, "agent", 30, boundary="reply_sent"),
    ]
    assert pair_results(turns) == {3: 2}
    assert at_boundary(turns)
    assert choose_cut(turns, keep_recent_tokens=30) == 3


def test_a_later_customer_turn_releases_a_call_whose_result_never_came() -> None:
    turns = [
        t(1, "tool_call", tool="lookup"),
        t(2, "agent", boundary="reply_sent"),
        t(3, "customer"),
        t(4, "agent", boundary="reply_sent"),
    ]
    assert not waiting_on_tool(turns)
    assert at_boundary(turns)


def test_a_released_call_takes_no_result_by_position_so_later_pairs_do_not_shift() -> None:
    turns = [
        t(1, "tool_call", tool="lookup"),  # lost: its result never comes
        t(2, "customer"),
        t(3, "tool_call", tool="lookup"),
        t(4, "tool_result", tool="lookup"),
        t(5, "agent", boundary="reply_sent"),
    ]
    assert pair_results(turns) == {4: 3}
    assert at_boundary(turns)


def test_a_released_call_is_still_answered_by_a_result_naming_its_id() -> None:
    turns = [t(1, "tool_call", call="slow"), t(2, "customer"), t(3, "tool_result", call="slow")]
    assert pair_results(turns) == {3: 1}


def test_a_reused_id_prefers_the_open_call_over_a_released_one() -> None:
    turns = [
        t(1, "tool_call", call="x"),  # lost
        t(2, "customer"),
        t(3, "tool_call", call="x"),
        t(4, "tool_result", call="x"),
        t(5, "agent", boundary="reply_sent"),
    ]
    assert pair_results(turns) == {4: 3}
    assert at_boundary(turns)


def test_a_tool_call_consumes_the_results_before_it() -> None:
    turns = chain(3)
    assert waiting_on_tool(turns)  # the last result is not consumed yet
    # Results 2 and 4 were consumed by the calls after them: only the last exchange waits.
    assert complete_prefix(turns) == 4
    assert complete_prefix(turns[:3]) == 2  # call, result, call: only the open call waits
    # A customer turn consumes nothing: the last result still waits.
    assert not at_boundary([*turns, t(7, "customer", boundary="reply_sent")])


def test_a_forty_pair_chain_keeps_only_the_newest_unfinished_exchange() -> None:
    turns = chain(40)
    assert complete_prefix(turns) == 78  # call 79 and result 80 stay verbatim
    open_call = [*turns, t(81, "tool_call", tool="search")]
    assert complete_prefix(open_call) == 80  # only the unanswered call stays


def test_a_chain_whose_only_exchange_is_unfinished_has_no_complete_prefix() -> None:
    assert complete_prefix(chain(1)) == 0
    assert complete_prefix([t(1, "tool_call")]) == 0
    assert complete_prefix([]) == 0


def test_complete_prefix_keeps_the_call_of_a_waiting_result() -> None:
    turns = [
        t(1, "customer"),
        t(2, "tool_call", call="a"),
        t(3, "tool_call", call="b"),
        t(4, "tool_result", call="b"),
        t(5, "agent"),  # consumes b's result; a still waits
        t(6, "tool_result", call="a"),
    ]
    assert complete_prefix(turns) == 1


def test_complete_prefix_is_the_whole_window_when_nothing_waits() -> None:
    turns = [t(1, "customer"), t(2, "tool_call"), t(3, "tool_result"), t(4, "agent")]
    assert complete_prefix(turns) == 4


def test_fit_cut_moves_past_keep_recent_tokens_until_the_request_fits() -> None:
    turns = [t(i, "customer" if i % 2 else "agent", tokens=100) for i in range(1, 11)]
    start = choose_cut(turns, keep_recent_tokens=500)
    assert start == 5
    # 1000 tokens of other context: only a 200-token tail fits under 1200.
    assert fit_cut(turns, start=start, limit=10, other_tokens=1000, threshold_tokens=1200) == 8
    # Already fits at start: start is kept.
    assert fit_cut(turns, start=start, limit=10, other_tokens=100, threshold_tokens=1200) == 5


def test_fit_cut_stops_at_limit_when_nothing_fits() -> None:
    turns = [t(i, "customer" if i % 2 else "agent", tokens=100) for i in range(1, 11)]
    assert fit_cut(turns, start=5, limit=7, other_tokens=1000, threshold_tokens=1200) == 7


def test_fit_cut_only_lands_on_safe_cuts() -> None:
    turns = [
        t(1, "customer", 100),
        t(2, "tool_call", 100, call="c"),
        t(3, "tool_result", 100, call="c"),
        t(4, "agent", 100, boundary="reply_sent"),
    ]
    # A 200-token tail (cut 2) would split the pair: the cut moves on to 3.
    assert fit_cut(turns, start=1, limit=4, other_tokens=0, threshold_tokens=250) == 3
    # The limit falls inside the pair: the largest safe cut before it.
    assert fit_cut(turns, start=1, limit=2, other_tokens=0, threshold_tokens=50) == 1


def test_fit_cut_from_zero_starts_at_the_first_safe_cut_and_zero_means_none() -> None:
    turns = [t(1, "customer", 10), t(2, "agent", 10)]
    assert fit_cut(turns, start=0, limit=2, other_tokens=1000, threshold_tokens=1015) == 1
    assert fit_cut([], start=0, limit=0, other_tokens=1000, threshold_tokens=10) == 0
    assert fit_cut(chain(1), start=0, limit=1, other_tokens=0, threshold_tokens=0) == 0


def test_plan_cut_at_a_boundary_pays_for_itself() -> None:
    turns = [t(i, "customer" if i % 2 else "agent", tokens=100, boundary="reply_sent") for i in range(1, 11)]
    plan = plan_cut(turns, keep_recent_tokens=500, other_tokens=1000, threshold_tokens=1200, forced=False)
    assert plan == CutPlan(cut=8, forced=False, fits=True)
    hopeless = plan_cut(turns, keep_recent_tokens=500, other_tokens=5000, threshold_tokens=1200, forced=False)
    assert hopeless == CutPlan(cut=10, forced=False, fits=False)


def test_plan_cut_under_the_hard_ceiling_keeps_the_unfinished_exchange() -> None:
    turns = chain(40, tokens=100)  # 8000 tokens, the last result unconsumed
    plan = plan_cut(turns, keep_recent_tokens=1000, other_tokens=500, threshold_tokens=2000, forced=True)
    assert plan.forced
    assert plan.cut == 68  # 1000 tokens of complete turns + the unfinished 200 = 1200 kept
    assert plan.fits
    tight = plan_cut(turns, keep_recent_tokens=1000, other_tokens=500, threshold_tokens=800, forced=True)
    assert tight == CutPlan(cut=78, forced=True, fits=True)  # never into the unfinished exchange
    over = plan_cut(turns, keep_recent_tokens=1000, other_tokens=500, threshold_tokens=600, forced=True)
    assert over == CutPlan(cut=78, forced=True, fits=False)


def test_plan_cut_under_the_hard_ceiling_with_nothing_complete_is_zero() -> None:
    plan = plan_cut(chain(1), keep_recent_tokens=0, other_tokens=0, threshold_tokens=0, forced=True)
    assert plan == CutPlan(cut=0, forced=True, fits=False)


def test_the_minimum_gain_is_a_share_of_the_budget_rounded_up() -> None:
    assert min_gain_tokens(8000, 0.1) == 800
    assert min_gain_tokens(512, 0.1) == 52  # 51.2 tokens: a compaction must free 52
    assert min_gain_tokens(8000, 0.0) == 0


def test_a_summary_is_expected_at_half_a_short_stretch_and_never_below_the_one_it_carries() -> None:
    assert expected_summary_tokens(100) == 50
    assert expected_summary_tokens(101) == 51
    assert expected_summary_tokens(5000) == SUMMARY_ESTIMATE_TOKENS
    assert expected_summary_tokens(100, current_summary_tokens=821) == 821
    assert expected_summary_tokens(0) == 0


def test_a_plan_says_what_it_frees_and_whether_that_pays() -> None:
    turns = [t(i, "customer" if i % 2 else "agent", tokens=100, boundary="reply_sent") for i in range(1, 11)]
    plan = plan_cut(
        turns,
        keep_recent_tokens=500,
        other_tokens=1000,
        threshold_tokens=1200,
        forced=False,
        min_gain_tokens=500,
    )
    assert plan.cut == 8 and plan.freed == 800 - 300  # eight turns replaced by a summary of ~300
    assert plan.pays
    # The summary in the request now is replaced too: it counts, and the new one is expected at least as large.
    carried = plan_cut(
        turns,
        keep_recent_tokens=500,
        other_tokens=1000,
        threshold_tokens=1200,
        forced=False,
        summary_tokens=400,
        min_gain_tokens=500,
    )
    assert carried.cut == 8 and carried.freed == 800 + 400 - 400 and carried.pays
    stingy = plan_cut(
        turns,
        keep_recent_tokens=500,
        other_tokens=1000,
        threshold_tokens=1200,
        forced=False,
        min_gain_tokens=501,
    )
    assert stingy.cut == 8 and not stingy.pays  # the cut is not moved to make it pay
    assert stingy == plan  # equality is the cut, as before: the gain is what it says of it


def test_a_plan_that_replaces_nothing_never_pays_and_the_hard_ceiling_always_does() -> None:
    turns = [t(1, "customer", tokens=6), t(2, "agent", tokens=6, boundary="reply_sent")]
    tiny = plan_cut(turns, keep_recent_tokens=0, other_tokens=0, threshold_tokens=5, forced=False)
    assert tiny.cut == 2 and tiny.freed == 6 and tiny.pays  # twelve tokens for a summary of six
    nothing = plan_cut([], keep_recent_tokens=100, other_tokens=0, threshold_tokens=5, forced=False)
    assert nothing.cut == 0 and nothing.freed == 0 and not nothing.pays
    forced = plan_cut(chain(10), keep_recent_tokens=50, other_tokens=0, threshold_tokens=10, forced=True)
    assert forced.cut > 0 and forced.pays
    forced_stingy = plan_cut(
        chain(10),
        keep_recent_tokens=50,
        other_tokens=0,
        threshold_tokens=10,
        forced=True,
        min_gain_tokens=10**6,
    )
    assert forced_stingy.pays


def test_the_room_a_pinned_state_leaves_under_the_threshold() -> None:
    # The storm of issue 27: 5,314 of a 6,400-token threshold, a minimum gain of 800.
    storm = Room(floor=5314, threshold=6400, min_gain=800)
    assert storm.turns_room == 1086 and storm.best_gain == 1086 - 300
    assert storm.crowded and not storm.state_over_threshold
    roomy = Room(floor=1000, threshold=6400, min_gain=800)
    assert not roomy.crowded and roomy.best_gain == 5100
    # No minimum: crowded only where no compaction can free anything at the threshold.
    assert not Room(floor=5314, threshold=6400, min_gain=0).crowded
    assert not Room(floor=6399, threshold=6400, min_gain=0).crowded  # a summary of ~1 for 1 token: 0 freed
    # At or over the threshold it is the state over the threshold, not crowded (the answer says which).
    full = Room(floor=6400, threshold=6400, min_gain=800)
    assert full.state_over_threshold and not full.crowded


ROLES = st.sampled_from(["customer", "agent", "tool_call", "tool_result"])
IDS = st.sampled_from(["", "", "a", "b"])
TOOLS = st.sampled_from(["", "search", "Search", "get-order", "get_order", "refund"])


@st.composite
def windows(draw: st.DrawFn) -> list[TurnInfo]:
    size = draw(st.integers(min_value=0, max_value=30))
    return [
        TurnInfo(
            number=100 + i,
            role=draw(ROLES),
            tokens=draw(st.integers(min_value=0, max_value=200)),
            boundary=draw(st.sampled_from(["", "reply_sent"])),
            tool_call_id=draw(IDS),
            tool=draw(TOOLS),
        )
        for i in range(size)
    ]


@settings(max_examples=400, deadline=None)
@given(
    turns=windows(),
    keep=st.integers(min_value=0, max_value=2000),
    other=st.integers(min_value=0, max_value=2000),
    threshold=st.integers(min_value=0, max_value=4000),
    forced=st.booleans(),
)
def test_property_no_cut_ever_splits_a_pair(
    turns: list[TurnInfo], keep: int, other: int, threshold: int, forced: bool
) -> None:
    """Random windows: pairs are well formed, and every cut the policy hands out keeps each pair whole."""
    pairs = pair_results(turns)
    role = {x.number: x.role for x in turns}
    assert all(role[r] == "tool_result" and role[c] == "tool_call" and c < r for r, c in pairs.items())
    assert len(set(pairs.values())) == len(pairs)  # a call answers at most one result

    cuts = safe_cuts(turns)
    assert cuts == sorted(set(cuts))
    assert all(1 <= c <= len(turns) for c in cuts)
    assert (len(turns) in cuts) == bool(turns)
    for c in range(1, len(turns) + 1):
        assert (c in cuts) == keeps_pairs_whole(turns, c)

    allowed = {0, *cuts}
    prefix = complete_prefix(turns)
    assert prefix in allowed
    chosen = choose_cut(turns, keep)
    assert chosen in allowed
    plan = plan_cut(
        turns, keep_recent_tokens=keep, other_tokens=other, threshold_tokens=threshold, forced=forced
    )
    assert plan.cut in allowed
    assert plan.forced is forced
    if forced:
        assert plan.cut <= prefix
    assert plan.fits == (other + sum(x.tokens for x in turns[plan.cut :]) <= threshold)
