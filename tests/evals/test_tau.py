"""The tau-bench / tau2-bench import adapter: transcripts become sundry-ticket/1 documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from desk.importer import ImportTicket, import_ticket
from evals.sources import detect, load
from evals.tau import brief_sentences, tau1_documents, tau2_documents
from tickets.models import PinnedState

TAU2_FILE = Path(settings.BASE_DIR) / "demo" / "realdata" / "tau2-retail-gpt-4.1.json"  # MIT, see its README


def order(order_id: str, history: list[tuple[str, float]], **extra: Any) -> str:
    return json.dumps(
        {
            "order_id": order_id,
            "status": extra.pop("status", "pending"),
            "items": extra.pop(
                "items", [{"item_id": "111", "price": 30.0}, {"item_id": "222", "price": 12.5}]
            ),
            "payment_history": [
                {"transaction_type": kind, "amount": amount, "payment_method_id": "card_1"}
                for kind, amount in history
            ],
            **extra,
        }
    )


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def simulation(messages: list[dict[str, Any]], task_id: str = "7") -> dict[str, Any]:
    return {
        "tasks": [
            {
                "id": task_id,
                "user_scenario": {
                    "instructions": {
                        "domain": "retail",
                        "reason_for_call": "You want to cancel order #W1. You prefer a refund to PayPal.",
                        "known_info": "You are ana_7 in zipcode 12345.",
                        "unknown_info": "You do not remember your email.",
                        "task_instructions": ".",
                    }
                },
            }
        ],
        "simulations": [
            {"id": "abcdef1234", "task_id": task_id, "messages": messages, "reward_info": {"reward": 1.0}}
        ],
    }


SMALL = simulation(
    [
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "Please cancel #W1, I ordered it by mistake."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c1", "get_order_details", order_id="#W1")],
        },
        {"role": "tool", "id": "c1", "content": order("#W1", [("payment", 42.5)])},
        {"role": "assistant", "content": "Shall I cancel #W1 for $42.50?"},
        {"role": "user", "content": "Yes."},
        # Two calls with the same id: results are paired by order.
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("dup", "cancel_pending_order", order_id="#W1", reason="ordered by mistake"),
                call("dup", "modify_user_address", user_id="ana_7", address1="1 Main St"),
            ],
        },
        {
            "role": "tool",
            "id": "dup",
            "content": order("#W1", [("payment", 42.5), ("refund", 42.5)], status="cancelled"),
        },
        {"role": "tool", "id": "dup", "content": "Error: address is not valid"},
        {"role": "assistant", "content": "Your order #W1 is cancelled and $42.50 is on its way back."},
    ]
)


def test_tau2_messages_become_turns_with_calls_paired_to_results() -> None:
    """Users are customers, assistant text is agent turns, calls and results pair by id then by order."""
    [doc] = tau2_documents(SMALL)
    assert doc.ticket_id == "tau2-retail-7-abcdef12"
    roles = [t.role for t in doc.turns]
    assert roles == [
        "agent", "customer", "tool_call", "tool_result", "agent", "customer",
        "tool_call", "tool_call", "tool_result", "tool_result", "agent",
    ]  # fmt: skip
    results = [t for t in doc.turns if t.role == "tool_result"]
    assert [r.tool for r in results] == ["get_order_details", "cancel_pending_order", "modify_user_address"]
    assert doc.turns[2].args == {"order_id": "#W1"}


def test_a_successful_write_is_an_action_with_the_money_its_result_moved() -> None:
    """The refund new in payment_history since the order was last shown is the action's amount."""
    [doc] = tau2_documents(SMALL)
    cancel_result = doc.turns[8]
    [event] = cancel_result.events
    assert (event.type, event.tool, event.item, event.amount_cents) == (
        "action_taken",
        "cancel_pending_order",
        "#W1",
        4250,
    )
    assert event.reversible is False and event.repeat_of_earlier is False


def test_a_result_starting_with_error_is_a_turn_but_never_an_action() -> None:
    [doc] = tau2_documents(SMALL)
    failed = doc.turns[9]
    assert failed.content.startswith("Error") and failed.events == []
    actions = [e for t in doc.turns for e in t.events if e.type == "action_taken"]
    assert [a.tool for a in actions] == ["cancel_pending_order"]


def test_the_brief_becomes_constraints_at_the_first_customer_turn() -> None:
    """reason_for_call and task_instructions sentences; identity facts and the '.' placeholder are left out."""
    [doc] = tau2_documents(SMALL)
    first_customer = doc.turns[1]
    assert [e.text for e in first_customer.events] == [
        "You want to cancel order #W1.",
        "You prefer a refund to PayPal.",
    ]
    assert all(not t.events for t in doc.turns[:1])


def test_replies_to_the_customer_are_boundaries_named_after_the_step() -> None:
    [doc] = tau2_documents(SMALL)
    boundaries = [t.boundary for t in doc.turns if t.role == "agent"]
    assert boundaries == ["reply_sent", "reply_sent", "order_cancelled"]


def test_a_second_successful_write_on_the_same_order_is_imported_as_a_deliberate_repeat() -> None:
    data = simulation(
        [
            {"role": "user", "content": "Change the address of #W1, twice."},
            {"role": "assistant", "tool_calls": [call("a", "modify_pending_order_address", order_id="#W1")]},
            {"role": "tool", "id": "a", "content": order("#W1", [("payment", 10.0)])},
            {"role": "assistant", "tool_calls": [call("b", "modify_pending_order_address", order_id="#W1")]},
            {"role": "tool", "id": "b", "content": order("#W1", [("payment", 10.0)])},
            {"role": "assistant", "content": "Done."},
        ]
    )
    [doc] = tau2_documents(data)
    actions = [e for t in doc.turns for e in t.events if e.type == "action_taken"]
    assert [(a.repeat_of_earlier, bool(a.reason)) for a in actions] == [(False, False), (True, True)]


@pytest.mark.django_db
def test_an_adapted_transcript_imports_through_the_desk_services() -> None:
    """The document is a valid sundry-ticket/1 ticket: imported, its write pinned with its amount."""
    [doc] = tau2_documents(SMALL)
    report = import_ticket(ImportTicket.model_validate(doc.model_dump()))
    assert report.actions_recorded == 1
    state = PinnedState.objects.get(ticket__ticket_id=doc.ticket_id).agent_json()
    assert state["refunded_cents_total"] == 4250
    assert len(state["customer_constraints"]) == 2


def test_tau_bench_v1_runs_are_read_too() -> None:
    """tau-bench (v1) results: a list of runs with an OpenAI-style `traj` and `info.task.instruction`."""
    runs = [
        {
            "task_id": 3,
            "reward": 1.0,
            "trial": 0,
            "info": {
                "task": {
                    "user_id": "u1",
                    "instruction": "You are u1. You want to return order #W9. Be brief.",
                }
            },
            "traj": [
                {"role": "system", "content": "# Retail agent policy ... (long wiki)"},
                {"role": "user", "content": "Hi, I want to return #W9."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {
                                "name": "return_delivered_order_items",
                                "arguments": json.dumps({"order_id": "#W9", "item_ids": ["111"]}),
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "t1",
                    "name": "return_delivered_order_items",
                    "content": order(
                        "#W9", [("payment", 42.5)], status="return requested", return_items=["111"]
                    ),
                },
                {"role": "assistant", "content": "Your return is booked."},
            ],
        }
    ]
    assert detect(json.dumps(runs)) == "tau"
    [doc] = tau1_documents(runs)
    assert [t.role for t in doc.turns] == ["customer", "tool_call", "tool_result", "agent"]
    [event] = doc.turns[2].events
    assert (event.tool, event.item, event.amount_cents) == ("return_delivered_order_items", "#W9", 0)
    assert event.args is not None and event.args["refund_due_cents"] == 3000
    assert [e.text for e in doc.turns[0].events] == [
        "You are u1.",
        "You want to return order #W9.",
        "Be brief.",
    ]
    assert doc.turns[3].boundary == "return_booked"


def test_brief_sentences_drop_the_empty_placeholder() -> None:
    assert brief_sentences(".") == []
    assert brief_sentences(None) == []
    assert brief_sentences("Do A. Then (maybe) B!") == ["Do A.", "Then (maybe) B!"]


def test_every_successful_write_of_the_public_file_becomes_one_action() -> None:
    """The README counts 299 tool calls and 54 successful writes; errors are never actions."""
    kind, docs = load(TAU2_FILE)
    assert kind == "tau2" and len(docs) == 40
    calls = [t for d in docs for t in d.turns if t.role == "tool_call"]
    actions = [(t, e) for d in docs for t in d.turns for e in t.events if e.type == "action_taken"]
    assert len(calls) == 299
    assert len(actions) == 54
    assert not any(t.content.startswith("Error") for t, _ in actions)
    assert all(not e.reversible for _, e in actions)
