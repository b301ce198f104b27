"""tau-bench and tau2-bench transcripts as `sundry-ticket/1` documents.

One simulation becomes one ticket, written through the same importer (and so the same services) a
live agent's turns go through. The mapping, and why:

- A user message is a `customer` turn; an assistant text message an `agent` turn; each assistant
  tool call a `tool_call` turn; each tool message a `tool_result` turn. Results are paired with
  their calls by id, and by order when an id is missing or repeats (oldest unanswered call first).
- A successful write call (its name starts with a write verb: cancel, return, exchange, modify,
  book, update, ...) becomes an irreversible `action_taken` event on its result turn. A result that
  starts with `Error` (or that tau2 flags as an error) is a turn, never an action.
- The action's `item` is the record the write changed, taken from its arguments: the order id
  (`#W4923227`), else the reservation id, else the user id. tau2's retail environment lets each
  write tool act once per order (the order's status moves on), so "same tool, same order" is the
  meaningful repeat for the desk's guard. A second successful write of the same tool on the same
  record in a transcript is imported as a deliberate repeat (`repeat_of_earlier` with a reason)
  so that importing the transcript never rewrites what happened.
- Money: the order JSON a write returns carries `payment_history`. The entries that are new since
  the last time the transcript showed that order are the money the write moved: refunds (money back
  to the customer) become `amount_cents`, so they count in the pinned `refunded_cents_total`;
  new payments are kept in the action's args as `charged_cents`. A return or exchange moves no
  money yet in tau2 (it is "requested"), so its `amount_cents` is 0 and the args keep what is due:
  `refund_due_cents` (the returned items' prices) or `price_difference_cents`.
- Constraints: the customer's brief (tau2 `user_scenario.instructions.reason_for_call` and
  `task_instructions`; tau-bench's `instruction`) is the ground truth of what the customer wants.
  Each sentence becomes a `constraint_stated` event on the first customer turn, so the eval checks
  that every one of them survives compaction. Identity facts (`known_info`, `unknown_info`) are not
  constraints and are left out. This is stricter than the transcript (the customer reveals the
  brief over several turns), which is the point: a constraint stated once must survive.
- Boundaries: every assistant text message to the customer completes a step (`reply_sent`, or the
  kind of write the step completed, e.g. `order_cancelled`). An assistant message that also makes
  tool calls is mid-decision and is no boundary.
- System messages (tau-bench's policy wiki) are not turns: the ticket class's system prompt is used.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from desk.importer import ImportClass, ImportEvent, ImportTicket, ImportTurn

WRITE_VERBS = ("cancel", "return", "exchange", "modify", "book", "update", "issue", "refund", "send")
NOT_WRITES = {"transfer_to_human_agents"}
STEP_BOUNDARY = {
    "cancel": "order_cancelled",
    "return": "return_booked",
    "exchange": "exchange_booked",
    "modify": "order_modified",
    "book": "booking_made",
    "update": "booking_updated",
    "issue": "refund_issued",
    "refund": "refund_issued",
}
ITEM_KEYS = ("order_id", "reservation_id", "user_id")
# The class tau2 tickets get unless the eval says otherwise: small enough that compaction fires on
# a typical 25-message retail simulation, large enough that the pinned state and a tail fit.
DEFAULT_BUDGET = 2000
DEFAULT_THRESHOLD = 0.8
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


class TauFormatError(ValueError):
    """The file is not a tau-bench or tau2-bench results file we can read."""


def is_tau2(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("simulations"), list)


def is_tau1(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and all(isinstance(r, dict) and "traj" in r for r in data)


def is_write(tool: str) -> bool:
    return tool not in NOT_WRITES and tool.split("_", 1)[0] in WRITE_VERBS


def item_for(tool: str, args: dict[str, Any]) -> str:
    for key in ITEM_KEYS:
        value = args.get(key)
        if value:
            return str(value)[:200]
    return tool


def to_cents(amount: Any) -> int:
    return round(float(amount) * 100)


def brief_sentences(text: str | None) -> list[str]:
    """The sentences of a brief, without the empty placeholder tau2 uses ('.')."""
    if not text:
        return []
    out = []
    for sentence in SENTENCE_END.split(" ".join(str(text).split())):
        sentence = sentence.strip()
        if len(re.findall(r"[A-Za-z0-9]", sentence)) >= 3:
            out.append(sentence[:2000])
    return out


@dataclass
class _Message:
    """One transcript message, the same for tau-bench and tau2-bench."""

    role: str  # user, assistant, tool, system
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, arguments: dict}
    tool_call_id: str = ""
    error: bool = False


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw.strip():
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {"raw": raw}
        return parsed if isinstance(parsed, dict) else {"value": parsed}
    return {}


def _normalize(raw: dict[str, Any]) -> _Message:
    calls = []
    for call in raw.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append(
            {
                "id": str(call.get("id") or ""),
                "name": str(call.get("name") or function.get("name") or ""),
                "arguments": _arguments(call.get("arguments", function.get("arguments"))),
            }
        )
    content = raw.get("content")
    return _Message(
        role=str(raw.get("role") or ""),
        content=content if isinstance(content, str) else ("" if content is None else json.dumps(content)),
        tool_calls=calls,
        tool_call_id=str(raw.get("tool_call_id") or raw.get("id") or "") if raw.get("role") == "tool" else "",
        error=bool(raw.get("error")),
    )


@dataclass
class _Pending:
    id: str
    name: str
    arguments: dict[str, Any]


class _Builder:
    """Turns a message list into import turns, tracking pairing, money and repeats."""

    def __init__(self, ticket_id: str) -> None:
        self.ticket_id = ticket_id
        self.turns: list[ImportTurn] = []
        self.pending: list[_Pending] = []
        self.orders: dict[str, list[dict[str, Any]]] = {}  # order id -> payment_history last seen
        self.done: Counter[tuple[str, str]] = Counter()
        self.step_writes: list[str] = []
        self.first_order = ""

    def add(self, message: _Message) -> None:
        if message.role == "user":
            text = message.content or "(no text)"
            for call in message.tool_calls:  # user-side tools (tau2 telecom): what the customer did
                text += f"\n[customer ran {call['name']}({json.dumps(call['arguments'])})]"
            self.turns.append(ImportTurn(role="customer", content=text))
        elif message.role == "assistant":
            if message.content.strip():
                boundary = "" if message.tool_calls else self._boundary()
                self.turns.append(ImportTurn(role="agent", content=message.content, boundary=boundary))
            for call in message.tool_calls:
                self.pending.append(_Pending(id=call["id"], name=call["name"], arguments=call["arguments"]))
                self.first_order = self.first_order or str(call["arguments"].get("order_id") or "")
                self.turns.append(
                    ImportTurn(
                        role="tool_call", tool=call["name"], args=call["arguments"], tool_call_id=call["id"]
                    )
                )
        elif message.role == "tool":
            self._result(message)

    def _boundary(self) -> str:
        writes, self.step_writes = self.step_writes, []
        if writes:
            return STEP_BOUNDARY.get(writes[-1].split("_", 1)[0], "action_recorded")
        return "reply_sent"

    def _match(self, call_id: str) -> _Pending | None:
        for index, pending in enumerate(self.pending):
            if call_id and pending.id == call_id:
                return self.pending.pop(index)
        return self.pending.pop(0) if self.pending else None

    def _result(self, message: _Message) -> None:
        call = self._match(message.tool_call_id)
        name = call.name if call else ""
        content = message.content or "(empty result)"
        turn = ImportTurn(
            role="tool_result",
            tool=name,
            content=content,
            tool_call_id=call.id if call else message.tool_call_id,
        )
        parsed = _json_object(content)
        failed = message.error or content.lstrip().startswith("Error")
        if call and is_write(call.name) and not failed:
            turn.events.append(self._action(call, parsed))
            self.step_writes.append(call.name)
        if parsed is not None and isinstance(parsed.get("payment_history"), list) and parsed.get("order_id"):
            self.orders[str(parsed["order_id"])] = list(parsed["payment_history"])
        self.turns.append(turn)

    def _action(self, call: _Pending, result: dict[str, Any] | None) -> ImportEvent:
        item = item_for(call.name, call.arguments)
        args: dict[str, Any] = dict(call.arguments)
        refunded = 0
        if result is not None:
            refunded, charged = self._money(result)
            if charged:
                args["charged_cents"] = charged
            returned = set(result.get("return_items") or [])
            if returned:
                args["refund_due_cents"] = sum(
                    to_cents(i.get("price", 0))
                    for i in result.get("items") or []
                    if i.get("item_id") in returned
                )
            if result.get("exchange_price_difference") is not None:
                args["price_difference_cents"] = to_cents(result["exchange_price_difference"])
        key = (call.name, item)
        self.done[key] += 1
        repeat = self.done[key] > 1
        return ImportEvent(
            type="action_taken",
            tool=call.name,
            item=item,
            amount_cents=refunded,
            reversible=False,
            args=args,
            idempotency_key=f"{self.ticket_id}-{call.id or len(self.turns)}"[:255],
            repeat_of_earlier=repeat,
            reason=f"the transcript shows another successful {call.name} on {item}" if repeat else "",
        )

    def _money(self, result: dict[str, Any]) -> tuple[int, int]:
        """(refunded, charged) cents: the payment_history entries new since the order was last shown."""
        history = result.get("payment_history")
        if not isinstance(history, list) or not result.get("order_id"):
            return 0, 0
        seen = Counter(json.dumps(e, sort_keys=True) for e in self.orders.get(str(result["order_id"]), []))
        refunded = charged = 0
        for entry in history:
            fingerprint = json.dumps(entry, sort_keys=True)
            if seen[fingerprint]:
                seen[fingerprint] -= 1
                continue
            kind = str(entry.get("transaction_type", ""))
            if kind == "refund":
                refunded += to_cents(entry.get("amount", 0))
            elif kind == "payment":
                charged += to_cents(entry.get("amount", 0))
        return refunded, charged


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _document(
    *,
    ticket_id: str,
    messages: list[dict[str, Any]],
    constraints: list[str],
    domain: str,
    budget: int,
    extra: dict[str, Any],
) -> ImportTicket:
    builder = _Builder(ticket_id)
    for raw in messages:
        builder.add(_normalize(raw))
    turns = builder.turns
    if not turns:
        raise TauFormatError(f"{ticket_id}: the transcript has no messages")
    first_customer = next((t for t in turns if t.role == "customer"), turns[0])
    first_customer.events[:0] = [ImportEvent(type="constraint_stated", text=text) for text in constraints]
    return ImportTicket.model_validate(
        {
            "ticket_id": ticket_id[:64],
            "order_id": (builder.first_order or "n/a")[:64],
            "seller_type": domain[:40] or "tau",
            "ticket_class": ImportClass(
                slug=f"tau-{budget}", token_budget=budget, compaction_threshold=DEFAULT_THRESHOLD
            ),
            "turns": turns,
            **extra,
        }
    )


def tau2_documents(data: dict[str, Any], *, budget: int = DEFAULT_BUDGET) -> list[ImportTicket]:
    """A tau2-bench results file (`{"tasks": [...], "simulations": [...]}`): one ticket per simulation."""
    if not is_tau2(data):
        raise TauFormatError("not a tau2-bench results file: no 'simulations' list")
    tasks = {str(t.get("id")): t for t in data.get("tasks") or [] if isinstance(t, dict)}
    documents = []
    for simulation in data["simulations"]:
        task_id = str(simulation.get("task_id"))
        task = tasks.get(task_id, {})
        instructions = (task.get("user_scenario") or {}).get("instructions") or {}
        if isinstance(instructions, str):
            constraints = brief_sentences(instructions)
            domain = "tau2"
        else:
            constraints = brief_sentences(instructions.get("reason_for_call")) + brief_sentences(
                instructions.get("task_instructions")
            )
            domain = str(instructions.get("domain") or "tau2")
        sim_id = str(simulation.get("id") or "")
        documents.append(
            _document(
                ticket_id=f"tau2-{domain}-{task_id}-{sim_id[:8]}",
                messages=simulation.get("messages") or [],
                constraints=constraints,
                domain=domain,
                budget=budget,
                extra={
                    "source": {
                        "format": "tau2-bench",
                        "task_id": task_id,
                        "simulation_id": sim_id,
                        "reward": (simulation.get("reward_info") or {}).get("reward"),
                    }
                },
            )
        )
    return documents


def tau1_documents(data: list[dict[str, Any]], *, budget: int = DEFAULT_BUDGET) -> list[ImportTicket]:
    """A tau-bench results file (a list of runs, each with `traj` and `info.task.instruction`)."""
    if not is_tau1(data):
        raise TauFormatError("not a tau-bench results file: expected a list of runs with 'traj'")
    documents = []
    seen: Counter[str] = Counter()
    for run in data:
        task = (run.get("info") or {}).get("task") or {}
        base = f"tau-{run.get('task_id')}-trial{run.get('trial', 0)}"
        seen[base] += 1
        ticket_id = base if seen[base] == 1 else f"{base}-{seen[base]}"
        documents.append(
            _document(
                ticket_id=ticket_id,
                messages=[m for m in run.get("traj") or [] if isinstance(m, dict)],
                constraints=brief_sentences(task.get("instruction")),
                domain="tau",
                budget=budget,
                extra={
                    "source": {
                        "format": "tau-bench",
                        "task_id": run.get("task_id"),
                        "reward": run.get("reward"),
                    }
                },
            )
        )
    return documents


def tau_documents(data: Any, *, budget: int = DEFAULT_BUDGET) -> list[ImportTicket]:
    if is_tau2(data):
        return tau2_documents(data, budget=budget)
    if is_tau1(data):
        return tau1_documents(data, budget=budget)
    raise TauFormatError("neither a tau2-bench nor a tau-bench results file")
