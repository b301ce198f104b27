"""Demo data: T-40118 plus generated tickets of several classes, built as import documents."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from django.conf import settings

ITEMS = [
    "garden-table",
    "patio-parasol",
    "desk-lamp",
    "office-chair",
    "kettle",
    "rug",
    "bookshelf",
    "planter",
]
SELLERS = ["marketplace", "first-party"]
CLASSES = [
    {"slug": "standard-8k", "token_budget": 8000, "compaction_threshold": 0.8},
    {"slug": "small-4k", "token_budget": 4000, "compaction_threshold": 0.75},
    {"slug": "large-32k", "token_budget": 32000, "compaction_threshold": 0.85},
]
CONSTRAINTS = [
    "no replacement wanted",
    "only contact by email",
    "refund to the original card only",
    "cannot be home on weekdays for a pickup",
    "does not want store credit",
]
QUESTIONS = [
    "photo of the damage still outstanding",
    "carrier's answer on the lost parcel",
    "seller's confirmation of the restock",
]


# T-40118 tells the seed's story: its class compacts with the scripted summarizer that replays the seed's
# lossy summary, so the review shows the $40 garden-table refund MISSING, as it was in the incident.
SEED_CLASS: dict[str, Any] = {
    "slug": "seed-8k",
    "token_budget": 8000,
    "compaction_threshold": 0.8,
    "summarizer_backend": "scripted",
    "summarizer_model": "seed-lossy-t40118",
}


# SUNDRY_DEMO_SUMMARIZER=openai: a real model writes T-40118's summary (the local one by default), on a budget
# whose summarizer prompt fits SmolLM2-135M's 8,192 tokens; the review page shows what it kept and dropped.
MODEL_CLASS: dict[str, Any] = {
    "slug": "seed-model-4k",
    "token_budget": 4000,
    "compaction_threshold": 0.8,
    "summarizer_backend": "openai",
}


def seed_class() -> dict[str, Any]:
    """T-40118's class: the seed's scripted one, or the real model's (SUNDRY_DEMO_SUMMARIZER=openai)."""
    if settings.SUNDRY_DEMO_SUMMARIZER == "openai":
        return {**MODEL_CLASS, "summarizer_model": settings.SUNDRY_DEMO_SUMMARIZER_MODEL}
    return dict(SEED_CLASS)


def reference_ticket_path() -> Path:
    """The scenario file from ../shared when present, otherwise the copy kept in the repo."""
    shared = settings.BASE_DIR.parent / "shared" / "scenarios" / "T-40118.json"
    return shared if shared.exists() else settings.BASE_DIR / "demo" / "T-40118.json"


def _tracking(rng: random.Random, order: str, scans: int) -> str:
    events = [
        {
            "ts": f"2026-11-{10 + i // 6:02d}T{(i * 3) % 24:02d}:00:00Z",
            "facility": f"{rng.choice(['Leeds', 'Sheffield', 'York'])} hub {i % 4 + 1}",
            "scan": rng.choice(["arrived", "departed", "in transit", "held for inspection"]),
            "detail": f"Package {order}-B scanned at dock {i % 8 + 1}; seal intact; weight {9 + i % 10 / 10:.1f} kg.",
        }
        for i in range(scans)
    ]
    return json.dumps({"carrier": "Parcelink", "status": "in transit", "events": events})


def generated_ticket(index: int) -> dict[str, Any]:
    rng = random.Random(index)
    ticket_class = CLASSES[index % len(CLASSES)]
    order = f"SU-{90000 + index}"
    item = rng.choice(ITEMS)
    turns: list[dict[str, Any]] = [
        {
            "role": "customer",
            "content": f"Hello, my {item.replace('-', ' ')} from order {order} arrived damaged.",
        },
        {
            "role": "agent",
            "content": "I'm sorry to hear that. Could you tell me more about the damage?",
            "boundary": "reply_sent",
        },
    ]
    constraint = rng.choice(CONSTRAINTS)
    turns.append(
        {
            "role": "customer",
            "content": f"One corner is cracked. Also, {constraint}, please.",
            "events": [{"type": "constraint_stated", "text": constraint}],
        }
    )
    refunded = False
    rounds = rng.randint(2, 9)
    for round_number in range(rounds):
        call_id = f"call_{round_number}"
        turns.append(
            {"role": "tool_call", "tool": "track_parcel", "tool_call_id": call_id, "args": {"order": order}}
        )
        turns.append(
            {
                "role": "tool_result",
                "tool": "track_parcel",
                "tool_call_id": call_id,
                "content": _tracking(rng, order, rng.randint(5, 40)),
            }
        )
        turn: dict[str, Any] = {
            "role": "agent",
            "content": f"The parcel is still moving through the network (check {round_number + 1}).",
            "boundary": "reply_sent",
        }
        if round_number == 0 and rng.random() < 0.6:
            turn["events"] = [{"type": "question_opened", "text": rng.choice(QUESTIONS)}]
        turns.append(turn)
        turns.append(
            {"role": "customer", "content": rng.choice(["Any news?", "Thanks.", "Still waiting here."])}
        )
        if not refunded and rng.random() < 0.5:
            amount = rng.choice([1500, 2500, 4000, 6000])
            refund_call = f"rf_{round_number}"
            turns.append(
                {
                    "role": "tool_call",
                    "tool": "issue_refund",
                    "tool_call_id": refund_call,
                    "args": {"order": order, "item": item, "amount_cents": amount},
                }
            )
            turns.append(
                {
                    "role": "tool_result",
                    "tool": "issue_refund",
                    "tool_call_id": refund_call,
                    "content": json.dumps({"status": "succeeded", "amount_cents": amount, "item": item}),
                    "events": [
                        {
                            "type": "action_taken",
                            "tool": "issue_refund",
                            "item": item,
                            "amount_cents": amount,
                            "reversible": False,
                            "idempotency_key": f"demo-{index}-rf",
                        }
                    ],
                }
            )
            turns.append(
                {
                    "role": "agent",
                    "content": f"I've refunded ${amount / 100:.2f} for the {item}.",
                    "boundary": "refund_issued",
                }
            )
            refunded = True
    return {
        "format": "sundry-ticket/1",
        "ticket_id": f"T-{50000 + index}",
        "order_id": order,
        "seller_type": rng.choice(SELLERS),
        "ticket_class": ticket_class,
        "turns": turns,
    }


def demo_status(index: int) -> str:
    """A spread of statuses, so the queue's status filter has something to filter."""
    for every, status in ((5, "resolved"), (7, "waiting"), (11, "escalated")):
        if index % every == every - 1:
            return status
    return "open"


# The demo's payments ledger: an entry for every refund the tickets record, but two stories told wrong on
# purpose. On UNRECORDED_TICKET the payment system refunded money that no action records (the agent's tool ran
# and the state never heard of it); on UNCONFIRMED_TICKET the agent recorded a refund the ledger never saw.
SEED_LEDGER_ENTRY: dict[str, Any] = {
    "id": "re_demo_40118_garden_table",
    "order_id": "SU-87310",
    "kind": "refund",
    "amount_cents": 4000,
    "currency": "USD",
    "external_ref": "re_demo_40118",
}
UNRECORDED_AMOUNT_CENTS = 2500


def _refund_of(doc: dict[str, Any]) -> int | None:
    for turn in doc["turns"]:
        for event in turn.get("events", []):
            if event.get("type") == "action_taken" and event.get("tool") == "issue_refund":
                return int(event["amount_cents"])
    return None


def demo_ledger_tickets(count: int) -> tuple[str | None, str | None]:
    """The generated tickets the ledger disagrees with: (a ticket without a refund, which the ledger says
    was refunded; a ticket with a refund, which the ledger never saw)."""
    docs = [generated_ticket(i) for i in range(count)]
    unrecorded = next((d["ticket_id"] for d in docs if _refund_of(d) is None), None)
    unconfirmed = next((d["ticket_id"] for d in docs if _refund_of(d) is not None), None)
    return unrecorded, unconfirmed


def demo_ledger(count: int, *, at: str) -> list[dict[str, Any]]:
    """The ledger entries for the demo's tickets (`at`: their time, ISO 8601), in the webhook's format."""
    unrecorded, unconfirmed = demo_ledger_tickets(count)
    entries = [{**SEED_LEDGER_ENTRY, "created_at": at}]
    for index in range(count):
        doc = generated_ticket(index)
        ticket_id = doc["ticket_id"]
        amount = _refund_of(doc)
        if ticket_id == unrecorded:
            amount = UNRECORDED_AMOUNT_CENTS
        elif amount is None or ticket_id == unconfirmed:
            continue
        entries.append(
            {
                "id": f"re_demo_{ticket_id}",
                "ticket_id": ticket_id,
                "kind": "refund",
                "amount_cents": amount,
                "currency": "USD",
                "created_at": at,
            }
        )
    return entries
