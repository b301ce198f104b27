"""`manage.py check_summary`: one summary against one pinned state, JSON out, exit 0 / 1 / 2."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

ROOT = Path(__file__).resolve().parents[2]

# As GET /api/v1/tickets/{id}/state/ answers it: every stored field, plus the ticket's identifiers.
STATE: dict[str, Any] = {
    "ticket": "T-40118",
    "order": "SU-87310",
    "seller_type": "marketplace",
    "version": 5,
    "actions_taken": [
        {
            "id": "A1",
            "tool": "issue_refund",
            "item": "garden-table",
            "amount_cents": 4000,
            "at_turn": 6,
            "reversible": False,
            "args": {"order": "SU-87310"},
            "idempotency_key": "T-40118-refund-1",
            "recorded_by": "agent",
            "repeat_of": None,
            "reason": "",
            "reversed": False,
            "reversed_reason": "",
        },
        # A reversible action recorded by a runtime that sends only what it must.
        {"id": "A2", "tool": "hold_parcel", "item": "SU-90701", "reversible": True},
    ],
    "customer_constraints": [{"id": "C1", "text": "no replacement wanted", "at_turn": 3}],
    "open_questions": [
        {"id": "Q1", "text": "photo of the second item (parasol) still outstanding", "at_turn": 20}
    ],
    "decisions": [{"id": "D1", "text": "approved a refund of $40 for the garden table", "at_turn": 5}],
    "refunded_cents_total": 4000,
}
GOOD_SUMMARY: dict[str, Any] = {
    "decisions": ["Refund of $40 for the garden table approved."],
    "actions_taken": ["Refunded $40 for the table (turn 6).", "A2: parcel held."],
    "customer_constraints": ["Customer declined a replacement."],
    "open_questions": ["Still waiting on the parasol photo."],
    "narrative": "Damage to the garden table; parasol delayed.",
}
BAD_SUMMARY: dict[str, Any] = {
    "decisions": ["Refund denied."],
    "actions_taken": ["The refund was NOT issued.", "Put SU-90701 on hold."],
    "customer_constraints": ["No refund wanted, replacement ok."],
    "open_questions": ["Parasol photo received."],
    "narrative": "",
}


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def run(tmp_path: Path, state: Any, summary: Any) -> tuple[int, dict[str, Any]]:
    out = StringIO()
    try:
        call_command(
            "check_summary",
            state=write(tmp_path, "state.json", state),
            summary=write(tmp_path, "summary.json", summary),
            stdout=out,
        )
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, json.loads(out.getvalue())


def test_a_summary_that_carries_everything_exits_0_with_every_id_covered(tmp_path: Path) -> None:
    code, report = run(tmp_path, STATE, GOOD_SUMMARY)
    assert code == 0
    assert report["missing"] == []
    assert sorted(c["id"] for c in report["covered"]) == ["A1", "A2", "C1", "D1", "Q1"]


def test_a_summary_that_loses_things_exits_1_and_says_why_for_each(tmp_path: Path) -> None:
    code, report = run(tmp_path, STATE, BAD_SUMMARY)
    assert code == 1
    missing = {m["id"]: m["why"] for m in report["missing"]}
    assert set(missing) == {"A1", "C1", "Q1", "D1"}
    assert "did not happen" in missing["A1"]
    assert "'replacement'" in missing["C1"]
    assert "answered" in missing["Q1"]
    assert [c["id"] for c in report["covered"]] == ["A2"]


def test_the_seed_state_shape_without_decisions_is_accepted(tmp_path: Path) -> None:
    state = {k: v for k, v in STATE.items() if k != "decisions"}
    code, report = run(tmp_path, state, {**GOOD_SUMMARY, "decisions": []})
    assert code == 0 and len(report["covered"]) == 4


@pytest.mark.parametrize(
    ("state", "summary", "message"),
    [
        ("{not json", GOOD_SUMMARY, "state file"),
        (STATE, "", "summary file"),
        ([STATE], GOOD_SUMMARY, "wrong shape"),
        # A summary passed where the state belongs: entries are strings, not pinned items.
        (GOOD_SUMMARY, GOOD_SUMMARY, "actions_taken.0"),
        ({**STATE, "actions_taken": [{"tool": "issue_refund"}]}, GOOD_SUMMARY, "actions_taken.0.id"),
        (
            {**STATE, "actions_taken": [{"id": "A1", "tool": "issue_refund", "amount_cents": -5}]},
            GOOD_SUMMARY,
            "amount_cents",
        ),
        (STATE, {k: v for k, v in GOOD_SUMMARY.items() if k != "open_questions"}, "open_questions"),
        (STATE, {**GOOD_SUMMARY, "actions_taken": "refunded $40"}, "actions_taken"),
    ],
)
def test_bad_input_is_a_command_error_with_exit_status_2(
    tmp_path: Path, state: Any, summary: Any, message: str
) -> None:
    with pytest.raises(CommandError, match=message) as caught:
        run(tmp_path, state, summary)
    assert caught.value.returncode == 2


def test_an_unreadable_file_is_exit_2(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot read the state file") as caught:
        call_command(
            "check_summary", state=str(tmp_path / "absent.json"), summary=str(tmp_path), stdout=StringIO()
        )
    assert caught.value.returncode == 2
    (tmp_path / "latin1.json").write_bytes(b'{"x": "caf\xe9"}')
    with pytest.raises(CommandError, match="cannot read the summary file"):
        call_command(
            "check_summary",
            state=write(tmp_path, "s.json", STATE),
            summary=str(tmp_path / "latin1.json"),
            stdout=StringIO(),
        )


def test_the_process_exit_codes_and_streams(tmp_path: Path) -> None:
    """Run as a shell would: 0 and 1 print JSON on stdout, 2 prints the message on stderr only."""
    state = write(tmp_path, "state.json", STATE)

    def shell(summary: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "manage.py",
                "check_summary",
                "--state",
                state,
                "--summary",
                write(tmp_path, "sum.json", summary),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    good, bad, broken = shell(GOOD_SUMMARY), shell(BAD_SUMMARY), shell("[1, 2")
    assert (good.returncode, bad.returncode, broken.returncode) == (0, 1, 2)
    assert json.loads(good.stdout)["missing"] == []
    assert len(json.loads(bad.stdout)["missing"]) == 4
    assert broken.stdout == "" and "not JSON" in broken.stderr


# The real airline case: a model's summary made of id references only.
FLIGHT_STATE: dict[str, Any] = {
    "ticket": "T-AIR-1",
    "order": "ZFA04Y",
    "seller_type": "airline",
    "version": 3,
    "actions_taken": [],
    "customer_constraints": [
        {"id": "C1", "text": "You do not want to fly before 11am est.", "at_turn": 1},
        {"id": "C2", "text": "You want to fly on May 20.", "at_turn": 1},
    ],
    "open_questions": [],
    "decisions": [],
}
EMPTY_SUMMARY: dict[str, Any] = {
    "decisions": [],
    "actions_taken": [],
    "customer_constraints": [],
    "open_questions": [],
    "narrative": "",
}


def test_a_summary_of_id_references_only_has_no_miss_and_exits_0(tmp_path: Path) -> None:
    summary = {**EMPTY_SUMMARY, "customer_constraints": ["C1", "C2"], "narrative": "Rebooking a flight."}
    code, report = run(tmp_path, FLIGHT_STATE, summary)
    assert code == 0
    assert report["missing"] == []
    assert {c["id"]: c["by"]["text"] for c in report["covered"]} == {"C1": "C1", "C2": "C2"}


def test_an_id_that_names_no_pinned_item_covers_nothing(tmp_path: Path) -> None:
    summary = {**EMPTY_SUMMARY, "customer_constraints": ["C3", "C1"]}
    code, report = run(tmp_path, FLIGHT_STATE, summary)
    assert code == 1
    assert [c["id"] for c in report["covered"]] == ["C1"]
    assert [(m["id"], m["why"]) for m in report["missing"]] == [
        ("C2", "the entry refers to another item by its id")
    ]
