"""The pure pieces of `make bench`: medians, ratios, wrk's output, the report's keys, the load plans."""

from __future__ import annotations

import json

import pytest

from bench import figures
from bench.figures import LoadResult
from bench.load import Plan, wrk_script

WRK_OUTPUT = """Running 3s test @ http://127.0.0.1:8000
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    12.31ms    3.10ms  40.02ms   80.00%
    Req/Sec   650.00     50.00   700.00     70.00%
  Latency Distribution
     50%   11.50ms
     75%   13.00ms
     90%   15.00ms
     99%    1.20s
  3901 requests in 3.00s, 2.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:   1300.33
Transfer/sec:    682.00KB
"""


def test_median_of_an_even_count_is_the_mean_of_the_middle_two() -> None:
    assert figures.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_median_of_nothing_is_none_not_an_error() -> None:
    assert figures.median([]) is None


def test_ratio_is_rounded_and_none_when_a_side_is_missing_or_zero() -> None:
    assert figures.ratio(2.0, 3.0) == 0.67
    assert figures.ratio(None, 3.0) is None
    assert figures.ratio(2.0, 0) is None


def test_growth_is_the_large_median_over_the_small_one() -> None:
    assert figures.growth_ratio([0.010, 0.011, 0.012], [0.030, 0.033, 0.90]) == 3.0


def test_wrk_output_gives_requests_seconds_p50_and_every_kind_of_error() -> None:
    result = figures.parse_wrk(WRK_OUTPUT)
    assert result == LoadResult(requests=3901, seconds=3.0, p50_ms=11.5, errors=7)
    assert result.rps == pytest.approx(1300.33, abs=0.01)


def test_wrk_output_in_microseconds_and_without_errors() -> None:
    output = "     50%  850.00us\n  120 requests in 1.01s, 1.00KB read\nRequests/sec: 118.81\n"
    result = figures.parse_wrk(output)
    assert result.p50_ms == pytest.approx(0.85) and result.errors == 0 and result.requests == 120


def test_wrk_output_without_a_request_count_is_refused() -> None:
    with pytest.raises(ValueError, match="no request count"):
        figures.parse_wrk("unable to connect to 127.0.0.1:9 Connection refused")


def test_throughput_summary_compares_reads_with_ps_and_writes_with_rprime() -> None:
    runs = {
        "state_get": {
            "d": [LoadResult(300, 3.0, 10.0, 0), LoadResult(330, 3.0, 9.0, 0), LoadResult(150, 3.0, 20.0, 2)],
            "ps": [LoadResult(400, 3.0, 7.0, 0), LoadResult(380, 3.0, 8.0, 0), LoadResult(390, 3.0, 7.5, 0)],
            "r": [LoadResult(1000, 2.0, 1.0, 0)],
        },
        "action_post": {"d": [LoadResult(100, 2.0, 30.0, 0)], "r": [LoadResult(400, 2.0, 5.0, 0)]},
    }
    summary = figures.throughput_summary(runs)
    row = summary["state_get"]
    assert row["d_rps"] == 100.0 and row["ps_rps"] == 130.0 and row["r_rps"] == 500.0
    assert row["d_over_ps"] == 0.77 and row["d_over_r"] == 0.2 and "d_over_rprime" not in row
    assert row["d_errors"] == 2 and row["d_p50_ms"] == 10.0
    assert summary["action_post"]["d_over_rprime"] == 0.25 and "d_over_ps" not in summary["action_post"]


def test_the_report_has_exactly_the_issue_keys_nested_even_when_a_figure_was_not_measured() -> None:
    summary = figures.throughput_summary({"state_get": {"d": [LoadResult(10, 1.0, 1.0, 0)]}})
    result = figures.report(
        throughput=summary,
        sections={"round_trips": {"state_get": 2, "intent_post": 6}, "growth": {"action_2000_over_0": 1.4}},
    )
    assert figures.missing_keys(result) == []
    assert result["round_trips"]["state_get"] == 2  # nested objects, not dotted keys
    assert figures.lookup(result, "round_trips.intent_post") == 6  # extra figures are kept beside
    assert figures.lookup(result, "growth.action_2000_over_0") == 1.4
    assert figures.lookup(result, "agent_turn.d_over_rprime") is None
    assert "memory.rss_10k_over_start" in figures.unmeasured(result)
    assert "growth.action_2000_over_0" not in figures.unmeasured(result)
    json.dumps(result)  # it is written as JSON


def test_the_required_keys_are_the_issues_list() -> None:
    issue = {
        "agent_turn.d_over_rprime",
        "agent_turn.p99_over_rprime",
        "settle.d_over_rprime",
        "action_post.d_over_rprime",
        "state_get.d_over_ps",
        "context_get.d_over_ps",
        *(f"round_trips.{n}" for n in ("state_get", "context_get", "turn_post", "action_post", "settle")),
        "growth.state_2000_over_1",
        "growth.context_2000_actions_over_1",
        "growth.context_50000_over_20",
        "growth.action_2000_over_0",
        "growth.ticket_page_50000_over_20",
        "growth.queue_1m_over_1k",
        "memory.rss_10k_over_start",
    }
    assert set(figures.REQUIRED_KEYS) == issue and len(figures.REQUIRED_KEYS) == len(issue)


def test_missing_keys_names_what_a_report_lacks() -> None:
    assert "growth.queue_1m_over_1k" in figures.missing_keys({"growth": {}})


def test_percentiles_are_nearest_rank_and_none_for_nothing() -> None:
    values = [float(n) for n in range(1, 101)]  # 1..100
    assert figures.percentile(values, 50) == 50.0
    assert figures.percentile(values, 99) == 99.0
    assert figures.percentile([7.0], 99) == 7.0
    assert figures.percentile([], 50) is None
    assert figures.mean([1.0, 2.0, 6.0]) == 3.0


def test_a_plan_makes_each_request_unique_and_rotates_its_tickets() -> None:
    plan = Plan("POST", ("/a/", "/b/"), {"Idempotency-Key": "{u}"}, '{"item": "item-{u}"}')
    first, second = plan.request("k1", 0), plan.request("k2", 1)
    assert first == (
        "POST",
        "/a/",
        {"Idempotency-Key": "k1", "Content-Type": "application/json"},
        b'{"item": "item-k1"}',
    )
    assert second[1] == "/b/" and second[2]["Idempotency-Key"] == "k2"


def test_the_wrk_script_carries_the_method_paths_headers_and_body() -> None:
    plan = Plan(
        "POST", ("/t/1/actions/",), {"Authorization": "Token abc", "Idempotency-Key": "{u}"}, '{"a": 1}'
    )
    script = wrk_script(plan, "run-1")
    assert "[====[/t/1/actions/]====]" in script
    # `[ [====[` and not `[[====[`: Lua would read the latter as a long string.
    assert "[ [====[Authorization]====] ] = [====[Token abc]====]" in script
    assert '["Content-Type"] = "application/json"' in script
    assert "wrk.format([====[POST]====], path, headers, body)" in script


def test_an_http_answer_is_read_by_its_length_or_its_chunks() -> None:
    from bench.agents import parse_response

    plain = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
    assert parse_response(plain) == (201, b'{"a":1}')
    chunked = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3\r\n:1}\r\n0\r\n\r\n'
    assert parse_response(chunked) == (200, b'{"a":1}')
    with pytest.raises(ValueError, match="not an HTTP answer"):
        parse_response(b"garbage")


def test_unique_items_are_letters_so_the_desks_item_identity_keeps_them_apart() -> None:
    from bench.figures import letters
    from core.identity import normalize_item

    names = [letters(n) for n in range(20_000)]
    assert len(set(names)) == 20_000 and names[:3] == ["qaq", "qbq", "qcq"] and letters(27) == "qbbq"
    items = {normalize_item(f"item-mix-{name}") for name in names}
    assert len(items) == 20_000  # with digits, `item-mix-999` and `item-mix-119` are one item
    assert normalize_item("item-mix-999") == normalize_item("item-mix-119")


def test_the_wrk_script_writes_its_counter_in_letters() -> None:
    script = wrk_script(Plan("POST", ("/a/",), {"Idempotency-Key": "{u}"}, '{"item": "item-{u}"}'), "p")
    assert "letters(counter)" in script and "tostring(counter)" not in script
    assert 'return "q" .. s .. "q"' in script
