"""parse_summary: what a summarizer's reply must be, and the raw newlines small models write inside strings."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from core.summary import parse_summary

FIELDS = {
    "decisions": [],
    "actions_taken": ["A1"],
    "customer_constraints": ["C1", "C2"],
    "open_questions": [],
}


def test_a_reply_with_a_raw_newline_inside_a_string_is_read() -> None:
    # What SmolLM2-135M wrote on E05 at temperature 0, shortened: a line break inside the narrative.
    text = json.dumps({**FIELDS, "narrative": "PLACEHOLDER"}).replace(
        "PLACEHOLDER", "Refund issued.\nWaiting\ton carrier."
    )
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # strict JSON refuses it
    summary = parse_summary(text)
    assert summary.narrative == "Refund issued.\nWaiting\ton carrier."
    assert summary.customer_constraints == ["C1", "C2"]


def test_a_reply_missing_a_required_field_is_still_refused_lenient_or_not() -> None:
    strict = json.dumps({"decisions": [], "actions_taken": [], "narrative": "x"})
    lenient = strict.replace('"x"', '"x\ny"')
    for text in (strict, lenient):
        with pytest.raises(ValidationError) as caught:
            parse_summary(text)
        assert "customer_constraints" in str(caught.value)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"decisions": [', ""])
def test_what_is_not_a_json_object_is_refused(text: str) -> None:
    with pytest.raises(ValidationError):
        parse_summary(text)
