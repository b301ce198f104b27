from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tickets.models import PinnedState, StateChange, Ticket, TicketClass, Turn

pytestmark = pytest.mark.django_db


def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


def database_rows() -> tuple[int, int, int, int, int]:
    return (
        Ticket.objects.count(),
        Turn.objects.count(),
        PinnedState.objects.count(),
        StateChange.objects.count(),
        TicketClass.objects.count(),
    )


def small_ticket(ticket_id: str = "T-1", **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "ticket_id": ticket_id,
        "order_id": "SU-1",
        "seller_type": "marketplace",
        "ticket_class": {"slug": "tiny", "token_budget": 4000, "compaction_threshold": 0.8},
        "turns": [
            {
                "role": "customer",
                "content": "hello",
                "events": [{"type": "constraint_stated", "text": "email only"}],
            },
            {"role": "agent", "content": "hi", "boundary": "reply_sent", "mood": "kept but ignored"},
        ],
    }
    doc.update(overrides)
    return doc


def test_importing_t40118_records_one_refund_and_refuses_the_second(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The seed's double refund: the turn-26 refund is refused as a repeat of turn 6."""
    call_command("import_tickets", "demo/T-40118.json")
    out = capsys.readouterr().out
    assert "T-40118: 26 turns, 1 actions recorded, 1 refused as expected" in out
    ticket = Ticket.objects.get(ticket_id="T-40118")
    state = ticket.pinned_state.agent_json()
    assert [(a["tool"], a["item"], a["amount_cents"], a["at_turn"]) for a in state["actions_taken"]] == [
        ("issue_refund", "garden-table", 4000, 6)
    ]
    assert state["refunded_cents_total"] == 4000
    assert [c["text"] for c in state["customer_constraints"]] == ["no replacement wanted"]
    assert [q["text"] for q in state["open_questions"]] == [
        "photo of the second item (parasol) still outstanding"
    ]
    changes = list(StateChange.objects.filter(ticket=ticket).order_by("to_version"))
    assert [c.op for c in changes] == ["opened", "constraint_stated", "action_taken", "question_opened"]
    assert all(c.actor_kind == "system" for c in changes)
    assert Turn.objects.get(ticket=ticket, number=21).extra["note"].startswith("a late duplicate")


def test_the_refusal_names_the_earlier_refund_and_its_turn(tmp_path: Path, scenario: dict[str, Any]) -> None:
    """Without expect_refused the import stops on the refusal, and says why."""
    del scenario["turns"][25]["events"][0]["expect_refused"]
    path = write(tmp_path, "t.json", json.dumps(scenario))
    with pytest.raises(CommandError) as error:
        call_command("import_tickets", str(path))
    message = str(error.value)
    assert (
        "turns.25.events.0" in message and "issue_refund of 4000 cents for garden-table at turn 6" in message
    )
    assert "refused: refused" not in message  # the repeat's own message opens with the word: said once
    assert not Ticket.objects.filter(ticket_id="T-40118").exists()


def test_a_list_and_json_lines_both_import(tmp_path: Path) -> None:
    listed = write(tmp_path, "list.json", json.dumps([small_ticket("T-1"), small_ticket("T-2")]))
    lines = write(tmp_path, "lines.jsonl", "\n".join(json.dumps(small_ticket(f"T-{i}")) for i in (3, 4)))
    call_command("import_tickets", str(listed), str(lines))
    assert sorted(Ticket.objects.values_list("ticket_id", flat=True)) == ["T-1", "T-2", "T-3", "T-4"]
    assert PinnedState.objects.get(ticket__ticket_id="T-3").items.customer_constraints[0].text == "email only"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"ticket_id": "T-1", "turns": [', "not valid JSON"),
        (json.dumps(small_ticket(turns=[{"role": "robot", "content": "x"}])), "ticket T-1: turns.0.role"),
        (
            json.dumps(
                small_ticket(
                    turns=[
                        {
                            "role": "tool_result",
                            "content": "ok",
                            "events": [
                                {"type": "action_taken", "tool": "issue_refund", "amount_cents": -400}
                            ],
                        }
                    ]
                )
            ),
            "turns.0.events.0.amount_cents",
        ),
        (
            json.dumps({k: v for k, v in small_ticket().items() if k != "ticket_id"}),
            "ticket #1 (no ticket_id): ticket_id",
        ),
    ],
    ids=["bad-json", "unknown-role", "negative-amount", "missing-ticket-id"],
)
def test_a_malformed_file_is_refused_and_leaves_the_database_as_it_was(
    tmp_path: Path, content: str, expected: str
) -> None:
    call_command("import_tickets", "demo/T-40118.json")
    before = database_rows()
    good = write(tmp_path, "good.json", json.dumps(small_ticket("T-OK")))
    bad = write(tmp_path, "bad.json", content)
    with pytest.raises(CommandError) as error:
        call_command("import_tickets", str(good), str(bad))
    assert str(bad) in str(error.value)
    assert expected in str(error.value)
    assert database_rows() == before


def test_a_ticket_that_fails_while_writing_is_not_half_written(tmp_path: Path) -> None:
    """An action at a turn that does not exist is only found while writing: the whole ticket rolls back."""
    doc = small_ticket(
        turns=[
            {"role": "customer", "content": "hi"},
            {
                "role": "tool_result",
                "content": "ok",
                "events": [
                    {
                        "type": "action_taken",
                        "tool": "issue_refund",
                        "item": "x",
                        "amount_cents": 100,
                        "at_turn": 7,
                    }
                ],
            },
        ]
    )
    path = write(tmp_path, "t.json", json.dumps(doc))
    with pytest.raises(CommandError, match="at_turn 7 is not a turn of T-1"):
        call_command("import_tickets", str(path))
    assert database_rows()[:4] == (0, 0, 0, 0)


def test_importing_the_same_ticket_twice_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "t.json", json.dumps(small_ticket()))
    call_command("import_tickets", str(path))
    with pytest.raises(CommandError, match="already exists"):
        call_command("import_tickets", str(path))
    assert Turn.objects.count() == 2


def _refused_at_second_ticket(tmp_path: Path) -> Path:
    bad = small_ticket(
        "T-2",
        turns=[
            {"role": "customer", "content": "hi"},
            {"role": "agent", "content": "ok", "events": [{"type": "question_resolved", "text": "Q9"}]},
        ],
    )
    return write(tmp_path, "two.json", json.dumps([small_ticket("T-1"), bad, small_ticket("T-3")]))


def test_a_file_refused_at_its_second_ticket_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    """All or nothing per file: a refusal of meaning, found only while writing, undoes the first ticket too;
    the error names the file, the ticket, the turn and the field."""
    path = _refused_at_second_ticket(tmp_path)
    with pytest.raises(CommandError) as raised:
        call_command("import_tickets", str(path))
    message = str(raised.value)
    assert str(path) in message and "ticket T-2" in message and "turns.1.events.0" in message
    assert "no open question 'Q9'" in message
    assert database_rows()[:4] == (0, 0, 0, 0)


def test_continue_on_error_imports_the_good_tickets_and_lists_the_refused_ones(tmp_path: Path) -> None:
    from io import StringIO

    out = StringIO()
    call_command(
        "import_tickets",
        str(_refused_at_second_ticket(tmp_path)),
        "--continue-on-error",
        stdout=out,
        stderr=StringIO(),
    )
    assert sorted(Ticket.objects.values_list("ticket_id", flat=True)) == ["T-1", "T-3"]
    assert "refused 1" in out.getvalue() and "ticket T-2" in out.getvalue()


def test_an_empty_tool_result_and_a_result_without_an_id_import(tmp_path: Path) -> None:
    doc = small_ticket(
        turns=[
            {"role": "tool_call", "tool": "think", "args": {"thought": "policy"}},
            {"role": "tool_result", "tool": "think", "content": ""},
            {"role": "agent", "content": "Done.", "boundary": "reply_sent"},
        ]
    )
    call_command("import_tickets", str(write(tmp_path, "t.json", json.dumps(doc))))
    assert list(Turn.objects.order_by("number").values_list("role", "content")) == [
        ("tool_call", ""),
        ("tool_result", ""),
        ("agent", "Done."),
    ]
