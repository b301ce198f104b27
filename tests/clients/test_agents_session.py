"""DeskSession: the Agents SDK's items as desk turns and the desk's context as the SDK's items.

Items are shaped the way the SDK hands them over (seen from a real Runner): user input without a
`type`, assistant messages with output_text parts and `__fake_id__`, function calls with `call_id` and a
JSON string of arguments, outputs without a tool name, reasoning with summary parts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sundry_desk_client import AsyncDeskClient, DeskClient
from sundry_desk_client.agents import AppendOnlyError, DeskSession, context_to_items, items_to_turns

from tests.clients.conftest import open_t40118, run_async
from tickets.models import TicketClass, Turn

FAKE_ID = "__fake_id__"


def assistant(text: str) -> Any:
    return {
        "id": FAKE_ID,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
        "provider_data": {"model": "scripted", "response_id": "chatcmpl-1"},
    }


def function_call(name: str, arguments: str, call_id: str) -> Any:
    return {"id": FAKE_ID, "type": "function_call", "name": name, "arguments": arguments, "call_id": call_id}


def output(call_id: str, text: Any) -> Any:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def test_a_reply_to_the_customer_is_a_boundary_and_a_message_before_a_tool_call_is_not() -> None:
    turns = items_to_turns(
        [
            {"role": "user", "content": "Where is my parasol?"},
            assistant("Let me check the carrier."),
            function_call("track_parcel", '{"order": "SU-87311"}', "call_2"),
            output("call_2", '{"status": "in transit"}'),
        ]
    )
    assert turns == [
        {"role": "customer", "content": "Where is my parasol?"},
        {"role": "agent", "content": "Let me check the carrier.", "boundary": ""},
        {
            "role": "tool_call",
            "tool": "track_parcel",
            "args": {"order": "SU-87311"},
            "tool_call_id": "call_2",
        },
        {
            "role": "tool_result",
            "content": '{"status": "in transit"}',
            "tool": "track_parcel",
            "tool_call_id": "call_2",
        },
    ]
    assert items_to_turns([assistant("It is in transit.")]) == [
        {"role": "agent", "content": "It is in transit.", "boundary": "reply_sent"}
    ]


def test_an_output_in_a_later_batch_gets_its_tool_name_from_the_call_seen_earlier() -> None:
    seen: dict[str, str] = {}
    items_to_turns([function_call("issue_refund", '{"item": "garden-table"}', "call_1")], call_tools=seen)
    later = items_to_turns([output("call_1", "")], call_tools=seen)
    assert later == [{"role": "tool_result", "content": "", "tool": "issue_refund", "tool_call_id": "call_1"}]


def test_odd_arguments_content_parts_reasoning_and_instructions_are_mapped_or_skipped() -> None:
    turns = items_to_turns(
        [
            {"type": "message", "role": "system", "content": "You are helpful."},
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Photo attached."},
                    {"type": "input_image", "image_url": "data:..."},
                ],
            },
            {"role": "user", "content": ""},
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "The refund was issued."}],
            },
            {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA"},
            function_call("lookup", "", "call_a"),
            function_call("lookup", "[1, 2]", "call_b"),
            function_call("lookup", "{not json", "call_c"),
            output("call_a", [{"type": "input_text", "text": "found"}]),
        ]
    )
    assert turns[0] == {"role": "customer", "content": "Photo attached.\n[input_image]"}
    assert turns[1] == {
        "role": "agent",
        "content": "The refund was issued.",
        "args": {"sdk_item": "reasoning"},
    }
    assert [t.get("args") for t in turns[2:5]] == [
        {},
        {"__raw_arguments__": "[1, 2]"},
        {"__raw_arguments__": "{not json"},
    ]
    assert turns[5] == {"role": "tool_result", "content": "found", "tool": "lookup", "tool_call_id": "call_a"}
    assert len(turns) == 6


def _context(turns: list[dict[str, Any]], *, summary: dict[str, Any] | None = None) -> Any:
    from sundry_desk_client import Context

    numbered = [{"number": i + 1, "tokens": 5, **turn} for i, turn in enumerate(turns)]
    return Context.model_validate(
        {
            "system_prompt": "",
            "pinned_state": {
                "ticket": "T-1",
                "order": "SU-1",
                "seller_type": "marketplace",
                "version": 3,
                "refunded_cents_total": 4000,
            },
            "summary": summary,
            "summary_covers_turns": [1, 14] if summary else None,
            "turns": numbered,
            "tokens": {"total": 100},
            "token_budget": 8000,
            "threshold_tokens": 6400,
        }
    )


def test_the_context_comes_back_with_state_and_summary_first_and_call_ids_tagged_with_their_turn() -> None:
    summary = {
        "decisions": [],
        "actions_taken": ["issue_refund garden-table 4000"],
        "customer_constraints": [],
        "open_questions": [],
        "narrative": "Refunded.",
    }
    items = context_to_items(
        _context(
            [
                {"role": "customer", "content": "Track both parcels"},
                {"role": "tool_call", "tool": "track_parcel", "args": {"n": 1}, "tool_call_id": "call_0"},
                {"role": "tool_result", "tool": "track_parcel", "tool_call_id": "call_0", "content": "a"},
                {"role": "agent", "content": "thinking", "args": {"sdk_item": "reasoning"}},
                {"role": "tool_call", "tool": "track_parcel", "args": {"n": 2}, "tool_call_id": "call_0"},
                {"role": "tool_result", "tool": "track_parcel", "tool_call_id": "call_0", "content": "b"},
                {
                    "role": "tool_call",
                    "tool": "lookup",
                    "args": {"__raw_arguments__": "[1]"},
                    "tool_call_id": "",
                },
                {"role": "tool_result", "tool": "", "tool_call_id": "", "content": ""},
                {"role": "tool_result", "tool": "ghost", "tool_call_id": "call_gone", "content": "orphan"},
                {"role": "agent", "content": "Both are moving.", "boundary": "reply_sent"},
            ],
            summary=summary,
        )
    )
    assert items[0]["role"] == "system" and '"refunded_cents_total":4000' in items[0]["content"]
    assert (
        items[1]["role"] == "system"
        and "turns 1-14" in items[1]["content"]
        and "issue_refund garden-table" in items[1]["content"]
    )
    rest = items[2:]
    assert rest[0] == {"type": "message", "role": "user", "content": "Track both parcels"}
    assert [(i["type"], i["call_id"]) for i in rest[1:5]] == [
        ("function_call", "call_0~t2"),
        ("function_call_output", "call_0~t2"),
        ("function_call", "call_0~t5"),
        ("function_call_output", "call_0~t5"),
    ]
    assert json.loads(rest[1]["arguments"]) == {"n": 1}
    assert rest[5] == {"type": "function_call", "call_id": "desk~t7", "name": "lookup", "arguments": "[1]"}
    assert rest[6] == {"type": "function_call_output", "call_id": "desk~t7", "output": ""}
    assert rest[7] == {"type": "message", "role": "assistant", "content": "Both are moving."}
    assert len(rest) == 8  # the reasoning turn and the orphan result stay in the desk


def test_a_session_stores_the_runs_items_as_turns_and_reads_them_back(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    session = DeskSession(ticket_id, client=client)
    batch = [
        {"role": "user", "content": "Where is my parasol?"},
        assistant("Let me check."),
        function_call("track_parcel", '{"order": "SU-87311"}', "call_2"),
        output("call_2", '{"status": "in transit"}'),
        assistant("It is in transit."),
    ]
    run_async(session.add_items(batch))  # type: ignore[arg-type]
    stored = list(
        Turn.objects.filter(ticket__ticket_id=ticket_id)
        .order_by("number")
        .values_list("role", "tool", "tool_call_id", "boundary")
    )
    assert stored == [
        ("customer", "", "", ""),
        ("agent", "", "", ""),
        ("tool_call", "track_parcel", "call_2", ""),
        ("tool_result", "track_parcel", "call_2", ""),
        ("agent", "", "", "reply_sent"),
    ]
    assert [a.turn for a in session.turn_answers] == [1, 2, 3, 4, 5]
    items = run_async(session.get_items())
    assert [i.get("type", "message") for i in items[1:]] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert run_async(session.get_items(limit=2)) == items[-2:]
    assert run_async(session.get_items(limit=0)) == []


def test_pop_and_clear_raise_because_the_desk_never_removes_a_turn(
    client: DeskClient, standard_class: TicketClass
) -> None:
    ticket_id = open_t40118(client)
    session = DeskSession(ticket_id, client=client)
    run_async(session.add_items([{"role": "user", "content": "hello"}]))
    with pytest.raises(AppendOnlyError, match="append-only"):
        run_async(session.pop_item())
    with pytest.raises(AppendOnlyError, match="new ticket"):
        run_async(session.clear_session())
    assert Turn.objects.filter(ticket__ticket_id=ticket_id).count() == 1


def test_a_session_on_the_async_client_compacts_in_the_desk_and_reads_the_summary(
    client: DeskClient, desk_url: str, desk_token: str, small_class: TicketClass
) -> None:
    ticket_id = open_t40118(client, ticket_class="small-1k")

    async def converse() -> tuple[list[Any], list[str]]:
        async with AsyncDeskClient(desk_url, desk_token) as desk:
            session = DeskSession(ticket_id, client=desk)
            for day in range(10):
                await session.add_items(
                    [
                        {
                            "role": "user",
                            "content": f"Day {day}: the parasol still has not arrived, any news? " * 3,
                        },
                        assistant(f"Day {day}: the carrier says it is still at the Leeds hub."),
                    ]
                )
            statuses = [a.compaction.status for a in session.turn_answers]
            return await session.get_items(), statuses

    items, statuses = run_async(converse())
    assert "applied" in statuses
    assert items[1]["role"] == "system" and items[1]["content"].startswith("Summary of turns 1-")
    assert items[-1] == {
        "type": "message",
        "role": "assistant",
        "content": "Day 9: the carrier says it is still at the Leeds hub.",
    }
    assert len(items) - 2 < 20  # the turns before the cut are no longer sent
