"""The tau-bench / tau2-bench import adapter: transcripts become sundry-ticket/1 documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from desk.importer import ImportClass, ImportTicket, import_ticket
from evals.sources import detect, load
from evals.tau import brief_sentences, brief_stated_at, tau1_documents, tau2_documents
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
    assert doc.seller_type == "retail" and doc.system_prompt  # the retail policy fixture: none in the file
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


def test_a_brief_sentence_is_pinned_at_the_customer_turn_that_states_it_and_never_otherwise() -> None:
    """reason_for_call and task_instructions sentences ('.' placeholders left out) are matched against the
    customer's turns: the one the customer says is pinned there; the one nobody says is only in the brief."""
    [doc] = tau2_documents(SMALL)
    first_customer = doc.turns[1]
    assert [e.text for e in first_customer.events] == ["You want to cancel order #W1."]
    assert not any(e.type == "constraint_stated" for t in doc.turns[2:] for e in t.events)
    assert doc.model_extra["source"]["brief"] == [
        {"text": "You want to cancel order #W1.", "stated_at_turn": 2},
        {"text": "You prefer a refund to PayPal.", "stated_at_turn": None},
    ]


def test_a_brief_sentence_is_stated_by_its_figures_and_most_of_its_words() -> None:
    turns = [
        "Hi, I need to change a flight.",
        "I'd rather not fly before 11am, if possible.",
        "I do not want to fly before 11am EST, and no basic economy.",
    ]
    assert brief_stated_at("You do not want to fly before 11am est.", turns) == 1
    assert brief_stated_at("You do not want to fly before 9am est.", turns) is None  # the figure differs
    assert brief_stated_at("You want a refund to the original payment method.", turns) is None
    assert brief_stated_at("You want to change a flight.", turns) == 0


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
    # Only what the customer said: the PayPal sentence of the brief is never stated, so never pinned.
    assert [c["text"] for c in state["customer_constraints"]] == ["You want to cancel order #W1."]


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
    # Only the sentence the customer's turn states; "You are u1." and "Be brief." stay in the brief.
    assert [e.text for e in doc.turns[0].events] == ["You want to return order #W9."]
    assert [b["stated_at_turn"] for b in doc.model_extra["source"]["brief"]] == [None, 1, None]
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


# --- every published shape: tau-bench (v1) retail and airline, tau2-bench airline and telecom ---

FIXTURES = Path(settings.BASE_DIR) / "evals" / "fixtures" / "tau"


def fixture(name: str) -> ImportTicket:
    [doc] = load(FIXTURES / name)[1]
    return doc


def _other_way(tool: str, args: dict[str, Any]) -> int:
    return sum(
        int(args.get(key, 0)) for key in ("refunded_cents", "charged_cents", "credited_cents") if key in args
    )


def actions(doc: ImportTicket) -> list[tuple[str, str, str, int, int]]:
    """(turn role, tool, item, amount cents, cents moved the other way) of each action_taken event: the amount
    is the money in the tool's direction (a refund tool's refund, a charge tool's charge, a certificate's
    credit); what the write moved the other way stays in its args."""
    return [
        (t.role, e.tool or "", e.item, e.amount_cents, _other_way(e.tool or "", e.args or {}))
        for t in doc.turns
        for e in t.events
        if e.type == "action_taken"
    ]


def test_v1_retail_without_a_policy_in_the_file_gets_the_fixture_policy_and_its_refunds() -> None:
    doc = fixture("tau1-retail.json")
    source = doc.model_extra["source"] if doc.model_extra else {}
    assert (doc.seller_type, source["format"], source["policy_source"]) == (
        "retail",
        "tau-bench",
        "evals/fixtures/policies/retail.md",
    )
    assert doc.system_prompt and doc.system_prompt.startswith("# Retail agent policy")
    assert (
        isinstance(doc.ticket_class, ImportClass)
        and doc.ticket_class.token_budget == source["policy_tokens"] + 2000
    )
    assert actions(doc) == [
        ("tool_result", "cancel_pending_order", "#W2000001", 18246, 0),
        (
            "tool_result",
            "modify_pending_order_items",
            "#W2000002",
            1799,
            0,
        ),  # the retry; the error is no action
        ("tool_result", "return_delivered_order_items", "#W2000003", 0, 0),
    ]
    assert source["money"] == {"refunded_cents": 18246 + 1799, "charged_cents": 0, "credited_cents": 0}


def test_v1_retail_pairs_parallel_results_by_id_reused_ids_by_order_and_nameless_ids_by_tool() -> None:
    doc = fixture("tau1-retail.json")
    results = [t for t in doc.turns if t.role == "tool_result"]
    # Parallel calls answered out of order: each result still names its own order.
    lookups = [
        (r.tool_call_id, json.loads(r.content)["order_id"]) for r in results if r.tool == "get_order_details"
    ]
    assert lookups[:2] == [("call_a4", "#W2000002"), ("call_a3", "#W2000001")]
    # The think tool returns "" under a reused id: an empty, valid turn paired with the think call.
    [think] = [r for r in results if r.tool == "think"]
    assert think.content == "" and think.tool_call_id == "call_a5"
    # A result with no tool_call_id answers the unanswered call of the tool it names.
    modified = [r for r in results if r.tool == "modify_pending_order_items"]
    assert [r.tool_call_id for r in modified] == ["call_a7", "call_a8"]
    keys = [e.idempotency_key for t in doc.turns for e in t.events if e.type == "action_taken"]
    assert len(set(keys)) == len(keys)


def test_v1_airline_cancellation_refunds_to_the_original_payment_and_a_booking_is_keyed_by_its_reservation() -> (
    None
):
    doc = fixture("tau1-airline.json")
    source = doc.model_extra["source"] if doc.model_extra else {}
    assert (doc.seller_type, source["policy_source"]) == ("airline", "transcript")
    assert actions(doc) == [
        ("tool_result", "cancel_reservation", "ZFA04Y", 75800, 0),  # the negated payment appended on cancel
        ("tool_result", "send_certificate", "mia_li_3668", 20000, 0),  # the certificate's amount argument
        (
            "tool_result",
            "book_reservation",
            "HATHAT",
            19200,
            0,
        ),  # the reservation the result names, not the user
        (
            "tool_result",
            "update_reservation_baggages",
            "HATHAT",
            5000,
            0,
        ),  # only the entry new since the booking
    ]
    [certificate] = [e for t in doc.turns for e in t.events if e.tool == "send_certificate"]
    assert certificate.args is not None and certificate.args["certificate_id"] == "certificate_3221322"
    # call_1 is reused after its first call was answered: the later result pairs with the later call.
    search = next(t for t in doc.turns if t.role == "tool_result" and t.tool == "search_direct_flight")
    assert search.tool_call_id == "call_1"


def test_tau2_airline_signed_refunds_flagged_errors_and_calls_without_ids() -> None:
    doc = fixture("tau2-airline.json")
    source = doc.model_extra["source"] if doc.model_extra else {}
    assert (doc.seller_type, source["format"], source["policy_source"]) == (
        "airline",
        "tau2-bench",
        "transcript",
    )
    assert actions(doc) == [
        (
            "tool_result",
            "update_reservation_flights",
            "FXK1N8",
            0,
            12000,
        ),  # a cheaper flight: -120 in the history, a refund by a charge tool (kept in its args)
        ("tool_result", "cancel_reservation", "FX4W15", 43000, 0),
    ]
    flagged = [t for t in doc.turns if t.role == "tool_result" and t.content.startswith("Error")]
    assert len(flagged) == 1 and flagged[0].events == []
    no_id = [t for t in doc.turns if t.role in {"tool_call", "tool_result"} and not t.tool_call_id]
    assert [(t.role, t.tool) for t in no_id] == [
        ("tool_call", "get_reservation_details"),
        ("tool_result", "get_reservation_details"),
    ]
    assert any(t.role == "tool_result" and t.tool == "think" and t.content == "" for t in doc.turns)


def test_tau2_telecom_customer_tools_are_customer_turns_and_bills_and_charges_are_money() -> None:
    doc = fixture("tau2-telecom.json")
    source = doc.model_extra["source"] if doc.model_extra else {}
    assert (doc.seller_type, source["policy_source"]) == ("telecom", "evals/fixtures/policies/telecom.md")
    assert doc.system_prompt and doc.system_prompt.startswith("# Telecom agent policy")
    assert actions(doc) == [
        ("tool_result", "send_payment_request", "B1002", 0, 0),
        ("customer", "make_payment", "B1002", 8550, 0),  # the customer paid the bill on their phone
        ("tool_result", "resume_line", "L1001", 0, 0),
        ("tool_result", "refuel_data", "L1001", 400, 0),  # refuel_data returns its charge
        ("tool_result", "enable_roaming", "L1001", 0, 0),
    ]
    toggles = [e for t in doc.turns for e in t.events if e.tool in {"resume_line", "enable_roaming"}]
    assert all(e.reversible for e in toggles)
    phone = [
        t.content
        for t in doc.turns
        if t.role == "customer" and t.content.startswith("[on the customer's phone")
    ]
    assert [c.split("(", 1)[0] for c in phone] == [
        "[on the customer's phone: check_payment_request",
        "[on the customer's phone: make_payment",
        "[on the customer's phone: reboot_device",
    ]
    # The customer's tool ids repeat the agent's (call_1, call_2): they never consume the agent's calls.
    results = [t for t in doc.turns if t.role == "tool_result"]
    calls = [t for t in doc.turns if t.role == "tool_call"]
    assert len(results) == len(calls) == 9
    assert [r.tool for r in results] == [c.tool for c in calls]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name", ["tau1-retail.json", "tau1-airline.json", "tau2-airline.json", "tau2-telecom.json"]
)
def test_each_published_shape_imports_and_its_pinned_money_matches_the_transcript(name: str) -> None:
    doc = fixture(name)
    import_ticket(ImportTicket.model_validate(doc.model_dump()))
    state = PinnedState.objects.get(ticket__ticket_id=doc.ticket_id).agent_json()
    money = (doc.model_extra or {})["source"]["money"]
    # Each total is its direction's money, less what a tool of the other direction moved (kept in its args).
    other = {"refunded_cents": 0, "charged_cents": 0, "credited_cents": 0}
    for action in state["actions_taken"]:
        for key in other:
            other[key] += int(action["args"].get(key, 0))
    assert state["refunded_cents_total"] == money["refunded_cents"] - other["refunded_cents"]
    assert state["charged_cents_total"] == money["charged_cents"] - other["charged_cents"]
    assert state["credited_cents_total"] == money["credited_cents"] - other["credited_cents"]


@pytest.mark.django_db
def test_an_imported_airline_booking_charges_what_its_tool_result_charged() -> None:
    """The agent reads `charged_cents_total`: a booking's payment lands there, as its result's history says."""
    doc = fixture("tau1-airline.json")
    [booked] = [t for t in doc.turns if t.role == "tool_result" and t.tool == "book_reservation"]
    paid = sum(round(p["amount"] * 100) for p in json.loads(booked.content)["payment_history"])
    import_ticket(ImportTicket.model_validate(doc.model_dump()))
    state = PinnedState.objects.get(ticket__ticket_id=doc.ticket_id).agent_json()
    [booking] = [a for a in state["actions_taken"] if a["tool"] == "book_reservation"]
    assert booking["amount_cents"] == paid == 19200
    bags = next(a for a in state["actions_taken"] if a["tool"] == "update_reservation_baggages")
    assert state["charged_cents_total"] == paid + bags["amount_cents"] == 19200 + 5000


def test_a_result_without_an_id_answers_the_oldest_call_of_the_tool_it_names() -> None:
    runs = [
        {
            "task_id": 1,
            "traj": [
                {"role": "user", "content": "Look up #W1 and my profile."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "function": {"name": "get_user_details", "arguments": '{"user_id": "u"}'},
                        },
                        {
                            "id": "b",
                            "function": {"name": "get_order_details", "arguments": '{"order_id": "#W1"}'},
                        },
                    ],
                },
                {"role": "tool", "name": "get_order_details", "content": order("#W1", [("payment", 5.0)])},
                {"role": "tool", "content": '{"user_id": "u"}'},
                {"role": "assistant", "content": "Found both."},
            ],
        }
    ]
    [doc] = tau1_documents(runs)
    results = [(t.tool, t.tool_call_id) for t in doc.turns if t.role == "tool_result"]
    assert results == [("get_order_details", "b"), ("get_user_details", "a")]
    assert doc.seller_type == "retail"  # no policy in the run: the tools it called name the domain


@pytest.mark.django_db
def test_a_cancellation_never_looked_up_refunds_its_payments_and_charges_nothing() -> None:
    """The agent cancels a real reservation without reading it first: its result shows the original payment
    and its negation. The payment is what the cancellation reversed, not a new charge; the replay against
    tau-bench's initial data agrees with the pinned state to the cent."""
    from evals.money import initial_records, replay
    from evals.results import EvalOptions
    from evals.runner import evaluate

    initial = initial_records("airline")["4WQ150"]
    after = json.loads(json.dumps(initial))
    after["payment_history"] += [
        {"payment_id": p["payment_id"], "amount": -p["amount"]} for p in initial["payment_history"]
    ]
    after["status"] = "cancelled"
    data = {
        "info": {
            "environment_info": {"domain_name": "airline", "policy": "# Airline agent policy\nBe kind."}
        },
        "tasks": [
            {"id": "9", "user_scenario": {"instructions": {"reason_for_call": "You want to cancel 4WQ150."}}}
        ],
        "simulations": [
            {
                "id": "sim-cancel",
                "task_id": "9",
                "messages": [
                    {"role": "user", "content": "Please cancel 4WQ150, I booked it by mistake."},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "name": "cancel_reservation",
                                "arguments": {"reservation_id": "4WQ150"},
                            }
                        ],
                    },
                    {"role": "tool", "id": "c1", "content": json.dumps(after)},
                    {"role": "assistant", "content": "It is cancelled and refunded."},
                ],
            }
        ],
    }
    [doc] = tau2_documents(data)
    paid = sum(round(p["amount"] * 100) for p in initial["payment_history"])
    assert actions(doc) == [("tool_result", "cancel_reservation", "4WQ150", paid, 0)]
    assert doc.model_extra["source"]["money"]["charged_cents"] == 0
    replayed = replay(doc)
    assert replayed is not None and replayed.totals.refunded == paid and replayed.totals.charged == 0
    [result] = evaluate([("inline", doc)], options=EvalOptions()).tickets
    assert (
        result.money_independent
        == result.money_state
        == {
            "refunded_cents_total": paid,
            "charged_cents_total": 0,
            "credited_cents_total": 0,
        }
    )
