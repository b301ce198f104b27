"""What money really moved on an adapted tau transcript, from the domain, not from the adapter.

Each successful write is replayed against tau-bench's initial airline reservations and retail orders
(`evals/fixtures/domain/`, gzipped copies of sierra-research/tau-bench's `reservations.json` and `orders.json`,
MIT), with the effects the published tools have (`tau_bench/envs/{airline,retail}/tools/*.py`):

- `cancel_reservation` appends the negation of every entry of the reservation's payment history (a refund of
  each payment); `cancel_pending_order` a refund of each entry's amount.
- `book_reservation` is paid by its `payment_methods` (a charge of their sum); `update_reservation_baggages`
  charges 50 per non-free bag above the reservation's count; `update_reservation_flights` charges (or refunds)
  the new flights' prices minus the old ones, per passenger (a new flight's price is the one its result shows:
  the flights table is not part of the data here).
- `modify_pending_order_items` pays (or refunds) the new items' prices minus the old ones (new prices from the
  result: the products table is not here either); `modify_pending_order_payment` pays the order's amount by the
  new method and refunds the old one.
- `send_certificate` gives its `amount` back (a credit); `return_delivered_order_items` and
  `exchange_delivered_order_items` only change the order's status: no money moves at the write.

A record the domain's data does not hold (a booking made in the transcript, a made-up fixture id) starts from the
first time a tool result shows it. Telecom has no initial data here: its figures are `None` (not verified).
Nothing here reads the adapter's ledger or the amounts it put on the actions.
"""

from __future__ import annotations

import copy
import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from desk.importer import ImportTicket
from evals.tau import is_write, source_of, to_cents

DOMAIN_DIR = Path(__file__).resolve().parent / "fixtures" / "domain"
REPLAYED_DOMAINS = ("airline", "retail")
# Writes whose price the domain reads from its flights or products table (not shipped here).
PRICED_BY_TABLES = ("update_reservation_flights", "modify_pending_order_items")
# The pinned state's total each money direction adds to.
TOTAL_OF = {
    "refund": "refunded_cents_total",
    "charge": "charged_cents_total",
    "credit": "credited_cents_total",
}


@cache
def initial_records(domain: str) -> dict[str, dict[str, Any]]:
    name = {"airline": "tau-bench-airline-reservations", "retail": "tau-bench-retail-orders"}[domain]
    with gzip.open(DOMAIN_DIR / f"{name}.json.gz", "rt", encoding="utf-8") as handle:
        data: dict[str, dict[str, Any]] = json.load(handle)
    return data


@dataclass
class Moved:
    """Cents moved by one write, by direction."""

    refunded: int = 0
    charged: int = 0
    credited: int = 0

    def add(self, other: Moved) -> None:
        self.refunded += other.refunded
        self.charged += other.charged
        self.credited += other.credited

    def of(self, effect: str) -> int:
        return {"refund": self.refunded, "charge": self.charged, "credit": self.credited}.get(effect, 0)

    def as_json(self) -> dict[str, int]:
        return {
            "refunded_cents": self.refunded,
            "charged_cents": self.charged,
            "credited_cents": self.credited,
        }


@dataclass
class ReplayedWrite:
    turn_index: int  # index of the result turn in the document
    tool: str
    record: str
    moved: Moved
    known_record: bool  # the domain's data or an earlier result showed the record: the write is checked


@dataclass
class Replay:
    domain: str
    writes: list[ReplayedWrite] = field(default_factory=list)
    # Records the domain's data lacks that a result showed before any write (a made-up fixture id): the
    # replay starts them from that result.
    unknown_records: set[str] = field(default_factory=set)

    @property
    def unchecked(self) -> list[ReplayedWrite]:
        """Writes on a record neither the data nor an earlier result showed: nothing to replay them on."""
        return [w for w in self.writes if not w.known_record]

    @property
    def totals(self) -> Moved:
        total = Moved()
        for write in self.writes:
            total.add(write.moved)
        return total


def _signed(amount: Any) -> int:
    return to_cents(amount)


def _split(new_entries: list[dict[str, Any]]) -> Moved:
    """New payment-history entries as money: retail entries say their type, airline ones are signed."""
    moved = Moved()
    for entry in new_entries:
        cents = _signed(entry.get("amount", 0))
        kind = entry.get("transaction_type")
        if kind == "refund" or (kind is None and cents < 0):
            moved.refunded += abs(cents)
        elif kind == "payment" or (kind is None and cents > 0):
            moved.charged += abs(cents)
    return moved


def _fingerprint(entry: dict[str, Any]) -> str:
    return json.dumps(
        {"amount": to_cents(entry.get("amount", 0)), **{k: v for k, v in entry.items() if k != "amount"}},
        sort_keys=True,
    )


def _beyond(shown: list[Any], known: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries of a result's payment history that the replayed record does not hold yet."""
    left = Counter(_fingerprint(e) for e in known)
    out = []
    for entry in shown:
        if not isinstance(entry, dict):
            continue
        key = _fingerprint(entry)
        if left[key]:
            left[key] -= 1
        else:
            out.append(entry)
    return out


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


class _Domain:
    """The domain's records as the writes change them."""

    def __init__(self, domain: str) -> None:
        self.domain = domain
        self.initial = initial_records(domain) if domain in REPLAYED_DOMAINS else {}
        self.records: dict[str, dict[str, Any]] = {}
        self.from_transcript: set[str] = set()

    def record(self, record_id: str) -> dict[str, Any] | None:
        """The record as the domain's data and the writes so far left it; None for a record neither the data
        nor an earlier result shows (a write on it cannot be checked)."""
        if record_id not in self.records:
            if record_id not in self.initial:
                return None
            self.records[record_id] = copy.deepcopy(self.initial[record_id])
        return self.records[record_id]

    def seen(self, shown: dict[str, Any]) -> None:
        """A read's result: a record the data lacks starts from what the transcript first shows of it."""
        record_id = str(shown.get("reservation_id") or shown.get("order_id") or "")
        if record_id and record_id not in self.initial and record_id not in self.records:
            self.records[record_id] = copy.deepcopy(shown)
            self.from_transcript.add(record_id)


def _replay_write(
    domain: _Domain, tool: str, args: dict[str, Any], result: dict[str, Any] | None
) -> tuple[str, Moved, bool]:
    """(record, money moved, record known from the domain's data) for one successful write."""
    record_id = str(args.get("reservation_id") or args.get("order_id") or "")
    known = bool(record_id) and (record_id in domain.initial or record_id in domain.records)
    if tool == "send_certificate":
        return str(args.get("user_id") or ""), Moved(credited=to_cents(args.get("amount", 0))), True
    if tool == "book_reservation":
        charged = sum(to_cents(p.get("amount", 0)) for p in args.get("payment_methods") or [])
        booked = str((result or {}).get("reservation_id") or "")
        if booked and result is not None:
            domain.records[booked] = copy.deepcopy(result)
        return booked, Moved(charged=charged), True
    record = domain.record(record_id)
    if record is None:
        return record_id, Moved(), False
    history: list[dict[str, Any]] = record.setdefault("payment_history", [])
    new: list[dict[str, Any]] = []
    if tool == "cancel_reservation":
        new = [{"payment_id": p.get("payment_id"), "amount": -float(p.get("amount", 0))} for p in history]
        record["status"] = "cancelled"
    elif tool == "cancel_pending_order":
        new = [
            {
                "transaction_type": "refund",
                "amount": p.get("amount", 0),
                "payment_method_id": p.get("payment_method_id"),
            }
            for p in history
        ]
        record["status"] = "cancelled"
    elif tool == "update_reservation_baggages":
        extra = max(0, int(args.get("nonfree_baggages") or 0) - int(record.get("nonfree_baggages") or 0))
        if extra:
            new = [{"payment_id": args.get("payment_id"), "amount": 50 * extra}]
        record["nonfree_baggages"] = int(args.get("nonfree_baggages") or 0)
        record["total_baggages"] = int(args.get("total_baggages") or 0)
    elif tool in PRICED_BY_TABLES and isinstance((result or {}).get("payment_history"), list):
        # The price comes from a table the data here lacks: what the write appended, beyond the record as
        # the domain's data (and the writes before) left it, is what it moved.
        new = _beyond((result or {}).get("payment_history") or [], history)
        if tool == "update_reservation_flights":
            record["flights"] = copy.deepcopy((result or {}).get("flights") or record.get("flights"))
            record["cabin"] = args.get("cabin", record.get("cabin"))
        else:
            record["items"] = copy.deepcopy((result or {}).get("items") or record.get("items"))
    elif tool == "update_reservation_flights":
        passengers = len(record.get("passengers") or [])
        shown = {(f.get("flight_number"), f.get("date")): f for f in (result or {}).get("flights") or []}
        old = {(f.get("flight_number"), f.get("date")): f for f in record.get("flights") or []}
        same_cabin = args.get("cabin") == record.get("cabin")
        total = 0.0
        new_flights = []
        for flight in args.get("flights") or []:
            key = (flight.get("flight_number"), flight.get("date"))
            price_of = old[key] if key in old and same_cabin else shown.get(key, {})
            total += float(price_of.get("price", 0)) * passengers
            new_flights.append({**flight, "price": price_of.get("price", 0)})
        total -= sum(float(f.get("price", 0)) for f in record.get("flights") or []) * passengers
        if round(total * 100):
            new = [{"payment_id": args.get("payment_id"), "amount": total}]
        record["flights"] = new_flights
        record["cabin"] = args.get("cabin", record.get("cabin"))
    elif tool == "modify_pending_order_items":
        shown_items = [i for i in (result or {}).get("items") or [] if isinstance(i, dict)]
        new_price = {str(i.get("item_id")): float(i.get("price", 0)) for i in shown_items}
        items = record.get("items") or []
        diff = 0.0
        for old_id, new_id in zip(args.get("item_ids") or [], args.get("new_item_ids") or [], strict=False):
            old_item = next((i for i in items if str(i.get("item_id")) == str(old_id)), None)
            if old_item is None:
                continue
            price = new_price.get(str(new_id), float(old_item.get("price", 0)))
            diff += price - float(old_item.get("price", 0))
            old_item["item_id"], old_item["price"] = new_id, price
        new = [
            {
                "transaction_type": "payment" if diff > 0 else "refund",
                "amount": abs(diff),
                "payment_method_id": args.get("payment_method_id"),
            }
        ]
    elif tool == "modify_pending_order_payment" and history:
        amount = history[0].get("amount", 0)
        new = [
            {
                "transaction_type": "payment",
                "amount": amount,
                "payment_method_id": args.get("payment_method_id"),
            },
            {
                "transaction_type": "refund",
                "amount": amount,
                "payment_method_id": history[0].get("payment_method_id"),
            },
        ]
    elif tool == "return_delivered_order_items":
        record["status"] = "return requested"
    elif tool == "exchange_delivered_order_items":
        record["status"] = "exchange requested"
    history.extend(new)
    return record_id, _split(new), known


def _answered(
    pending: list[tuple[str, str, dict[str, Any]]], call_id: str, tool: str
) -> tuple[str, dict[str, Any]]:
    """The call a result answers: the oldest with its id and tool, else with its tool, else the oldest."""
    for wanted in (
        lambda p: bool(call_id) and p[0] == call_id and p[1] == tool,
        lambda p: bool(call_id) and p[0] == call_id,
        lambda p: bool(tool) and p[1] == tool,
    ):
        for index, candidate in enumerate(pending):
            if wanted(candidate):
                pending.pop(index)
                return candidate[1], candidate[2]
    if pending:
        _, name, args = pending.pop(0)
        return name, args
    return tool, {}


def replay(doc: ImportTicket) -> Replay | None:
    """The money each successful write of an adapted transcript moved, replayed against the domain's data;
    None when the document is not an adapted airline or retail transcript."""
    domain_name = str(source_of(doc).get("domain") or "")
    if domain_name not in REPLAYED_DOMAINS:
        return None
    domain = _Domain(domain_name)
    pending: list[tuple[str, str, dict[str, Any]]] = []  # (call id, tool, args), oldest first
    result = Replay(domain=domain_name)
    for index, turn in enumerate(doc.turns):
        if turn.role == "tool_call":
            pending.append((turn.tool_call_id, turn.tool or "", dict(turn.args or {})))
            continue
        if turn.role != "tool_result":
            continue
        tool, args = _answered(pending, turn.tool_call_id, turn.tool or "")
        text = turn.content or ""
        shown = _json_object(text)
        failed = text.lstrip().startswith("Error")
        if not is_write(tool) or failed:
            if shown is not None:
                domain.seen(shown)
            continue
        record, moved, known = _replay_write(domain, tool, args, shown)
        result.writes.append(ReplayedWrite(index, tool, record, moved, known))
    result.unknown_records |= domain.from_transcript
    return result
