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


def test_throughput_summary_takes_medians_per_app_and_the_ratios_of_throughputs() -> None:
    runs = {
        "state_get": {
            "d": [LoadResult(300, 3.0, 10.0, 0), LoadResult(330, 3.0, 9.0, 0), LoadResult(150, 3.0, 20.0, 2)],
            "p": [LoadResult(400, 3.0, 7.0, 0), LoadResult(380, 3.0, 8.0, 0), LoadResult(390, 3.0, 7.5, 0)],
            "r": [LoadResult(1000, 2.0, 1.0, 0)],
        }
    }
    row = figures.throughput_summary(runs)["state_get"]
    assert row["d_rps"] == 100.0 and row["p_rps"] == 130.0 and row["r_rps"] == 500.0
    assert row["d_over_p"] == 0.77 and row["d_over_r"] == 0.2
    assert row["d_errors"] == 2 and row["d_p50_ms"] == 10.0


def test_the_report_has_every_required_key_even_when_a_figure_was_not_measured() -> None:
    summary = figures.throughput_summary({"state_get": {"d": [LoadResult(10, 1.0, 1.0, 0)]}})
    result = figures.report(
        throughput=summary, queries={"state_get": 3, "context_get_5000": 4}, growth={"action_300_over_0": 1.4}
    )
    assert figures.missing_keys(result) == []
    assert figures.lookup(result, "queries.state_get") == 3
    assert figures.lookup(result, "queries.context_get_5000") == 4
    assert figures.lookup(result, "growth.action_300_over_0") == 1.4
    assert figures.lookup(result, "turn_post.d_over_p") is None
    json.dumps(result)  # it is written as JSON


def test_missing_keys_names_what_a_report_lacks() -> None:
    assert "growth.queue_100k_over_1k" in figures.missing_keys({"growth": {}})


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
