"""The step in front of llama-cpp-python's server: OpenAI's json_schema response format as its json_object."""

from __future__ import annotations

from core.summary import SUMMARY_JSON_SCHEMA
from evals.llama_server import rewrite_request


def test_the_json_schema_format_becomes_json_object_with_the_same_schema() -> None:
    body = {
        "model": "m",
        "messages": [],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "ticket_summary", "strict": True, "schema": SUMMARY_JSON_SCHEMA},
        },
    }
    rewritten = rewrite_request(body, max_tokens=512)
    assert rewritten["response_format"] == {"type": "json_object", "schema": SUMMARY_JSON_SCHEMA}
    assert rewritten["max_tokens"] == 512
    assert body["response_format"]["type"] == "json_schema"  # the caller's body is left as it was


def test_a_request_that_sets_its_own_limit_or_no_format_is_left_alone() -> None:
    body = {"model": "m", "messages": [], "max_tokens": 50}
    assert rewrite_request(body, max_tokens=512) == body
