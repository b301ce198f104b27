"""tau-bench (v1) and tau2-bench transcripts, every published domain, as `sundry-ticket/1` documents.

One run (v1) or simulation (tau2) becomes one ticket, written through the same importer (and so the
same services) a live agent's turns go through. The mapping, and why:

- Domain: retail and airline (tau-bench and tau2-bench), telecom (tau2-bench). tau2 names it in
  `info.environment_info.domain_name` or the task's instructions; a v1 run's policy heading names it;
  otherwise the tools the agent called do.
- System prompt: the domain's policy, so the measured request is the real one: the v1 run's `system`
  message, tau2's `info.environment_info.policy`, else the domain's file in `evals/fixtures/policies/`
  (its README says where each comes from). The class budget is the policy's tokens plus the budget
  asked for (2,000 by default): the turns, state and summary get that much room on top of the policy.
- A user message is a `customer` turn; an assistant text message an `agent` turn; each assistant
  tool call a `tool_call` turn; each tool message a `tool_result` turn. A result answers the call
  with its id (the oldest unanswered one, since runtimes reuse ids), else, with no id or an unknown
  one, the oldest unanswered call of the tool it names, else the oldest unanswered call. Empty
  results stay empty: they are valid turns. tau2 telecom's user-side tools (the customer's phone)
  are what the customer did: each result is a `customer` turn naming the tool.
- A successful write (cancel, return, exchange, modify, book, update, send, suspend, resume, enable,
  disable, refuel; the customer's `make_payment`) becomes an `action_taken` event on its result
  turn. A result that starts with `Error` (or that tau2 flags as an error) is a turn, never an
  action. Line toggles (suspend, resume, roaming) undo each other and are recorded reversible.
- The action's `item` is the record the write changed: the order (`#W4923227`), the reservation
  (for a booking, the reservation its result names, not the user), the line, the bill, else the
  user. A second successful write of the same tool on the same record is imported as a deliberate
  repeat (`repeat_of_earlier` with a reason), so importing never rewrites what happened.
- Money, from what each domain's tools return: a write's result that shows a record's
  `payment_history` moved the entries new since the transcript last showed that record. Retail
  entries say `transaction_type` (refund or payment); airline entries are signed (a cancellation
  appends the negated payments: refunds to the original payment method). A certificate's money is
  its `amount` argument. Telecom's `refuel_data` returns its `charge`; the customer's
  `make_payment` says what it paid. Money back to the customer (refunds, certificates) is the
  action's `amount_cents`, so it counts in the pinned `refunded_cents_total`; money charged is kept
  in the action's args as `charged_cents`. Each document also carries the transcript's own ledger
  (`source.money`) so the eval can compare the pinned states with the transcripts per domain.
- Constraints: the customer's brief (tau2 `user_scenario.instructions.reason_for_call` and
  `task_instructions`; tau-bench's `instruction`), sentence by sentence, as `constraint_stated`
  events on the first customer turn: stricter than the transcript, which is the point.
- Boundaries: every assistant text message to the customer completes a step (`reply_sent`, or the
  kind of write the step completed, e.g. `order_cancelled`). An assistant message that also makes
  tool calls is mid-decision and is no boundary.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from core.identity import default_money_tools
from core.tokens import count_message
from desk.importer import ImportClass, ImportEvent, ImportTicket, ImportTurn

DOMAINS = ("retail", "airline", "telecom")
POLICY_DIR = Path(__file__).resolve().parent / "fixtures" / "policies"
WRITE_VERBS = (
    "cancel", "return", "exchange", "modify", "book", "update", "issue", "refund", "send",
    "suspend", "resume", "enable", "disable", "refuel", "make",
)  # fmt: skip
NOT_WRITES = {"transfer_to_human_agents"}
# Writes that a later write undoes: recorded reversible, so the repeat guard leaves them alone.
REVERSIBLE_VERBS = {"suspend", "resume", "enable", "disable"}
STEP_BOUNDARY = {
    "cancel": "order_cancelled",
    "return": "return_booked",
    "exchange": "exchange_booked",
    "modify": "order_modified",
    "book": "booking_made",
    "update": "booking_updated",
    "issue": "refund_issued",
    "refund": "refund_issued",
    "send": "request_sent",
    "suspend": "line_suspended",
    "resume": "line_resumed",
    "refuel": "data_refueled",
}
ITEM_KEYS = ("order_id", "reservation_id", "line_id", "bill_id", "user_id", "customer_id")
RECORD_KEYS = ("order_id", "reservation_id")  # records whose results show a payment_history
# Room for turns, state and summary on top of the domain policy: small enough that compaction fires on
# a typical 25-message simulation, large enough that the pinned state and a tail fit.
DEFAULT_BUDGET = 2000
DEFAULT_THRESHOLD = 0.8
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
PAYMENT_MADE = re.compile(r"Payment of (-?[0-9.]+) USD has been made for bill (\S+?)\.?$")
CERTIFICATE = re.compile(r"Certificate (\S+) added to user")


class TauFormatError(ValueError):
    """The file is not a tau-bench or tau2-bench results file we can read."""


def is_tau2(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("simulations"), list)


def is_tau1(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and all(isinstance(r, dict) and "traj" in r for r in data)


def verb(tool: str) -> str:
    return tool.split("_", 1)[0]


def is_write(tool: str) -> bool:
    return tool not in NOT_WRITES and verb(tool) in WRITE_VERBS


def item_for(tool: str, args: dict[str, Any], result: dict[str, Any] | None = None) -> str:
    """The record a write changed: a booking's is the reservation its result names."""
    if verb(tool) == "book" and result is not None and result.get("reservation_id"):
        return str(result["reservation_id"])[:200]
    for key in ITEM_KEYS:
        value = args.get(key)
        if value:
            return str(value)[:200]
    return tool


def to_cents(amount: Any) -> int:
    try:
        return round(float(amount) * 100)
    except (TypeError, ValueError):
        return 0


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


@cache
def fixture_policy(domain: str) -> str:
    """The domain's policy from `evals/fixtures/policies/` ("" for a domain we have none for)."""
    path = POLICY_DIR / f"{domain}.md"
    return path.read_text(encoding="utf-8") if domain in DOMAINS and path.is_file() else ""


def domain_of_tools(names: list[str]) -> str:
    joined = " ".join(names)
    if "reservation" in joined or "certificate" in joined or "flight" in joined:
        return "airline"
    if "order" in joined or "product" in joined:
        return "retail"
    if "line" in joined or "bill" in joined or "customer_by" in joined or "roaming" in joined:
        return "telecom"
    return "unknown"


def domain_of_policy(text: str) -> str:
    heading = text.lstrip().split("\n", 1)[0].casefold()
    return next((d for d in DOMAINS if d in heading), "")


@dataclass
class _Message:
    """One transcript message, the same for tau-bench and tau2-bench."""

    role: str  # user, assistant, tool, system
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, arguments: dict}
    tool_call_id: str = ""
    name: str = ""  # the tool a result names (tau-bench v1 sends it)
    requestor: str = "assistant"  # tau2: "user" for the customer's own tools
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
    is_tool = raw.get("role") == "tool"
    return _Message(
        role=str(raw.get("role") or ""),
        content=content if isinstance(content, str) else ("" if content is None else json.dumps(content)),
        tool_calls=calls,
        tool_call_id=str(raw.get("tool_call_id") or raw.get("id") or "") if is_tool else "",
        name=str(raw.get("name") or "") if is_tool else "",
        requestor=str(raw.get("requestor") or "assistant"),
        error=bool(raw.get("error")),
    )


def _call_names(messages: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for m in messages for c in _normalize(m).tool_calls]


@dataclass
class _Pending:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Ledger:
    """Money the transcript's tool results show moving, in cents."""

    refunded_cents: int = 0  # back to the customer: refunds, certificates
    charged_cents: int = 0  # from the customer: payments, price differences, fees, bills paid

    def as_json(self) -> dict[str, int]:
        return {"refunded_cents": self.refunded_cents, "charged_cents": self.charged_cents}


class _Builder:
    """Turns a message list into import turns, tracking pairing, money and repeats."""

    def __init__(self, ticket_id: str) -> None:
        self.ticket_id = ticket_id
        self.turns: list[ImportTurn] = []
        self.pending: list[_Pending] = []
        self.user_pending: list[_Pending] = []
        self.records: dict[str, list[dict[str, Any]]] = {}  # order or reservation id -> payment_history
        self.done: Counter[tuple[str, str]] = Counter()
        self.step_writes: list[str] = []
        self.first_record = ""
        self.ledger = Ledger()

    def add(self, message: _Message) -> None:
        if message.role == "user":
            for call in message.tool_calls:  # the customer's own tools (tau2 telecom): answered below
                self.user_pending.append(
                    _Pending(id=call["id"], name=call["name"], arguments=call["arguments"])
                )
            if message.content.strip():
                self.turns.append(ImportTurn(role="customer", content=message.content))
        elif message.role == "assistant":
            if message.content.strip():
                boundary = "" if message.tool_calls else self._boundary()
                self.turns.append(ImportTurn(role="agent", content=message.content, boundary=boundary))
            for call in message.tool_calls:
                self.pending.append(_Pending(id=call["id"], name=call["name"], arguments=call["arguments"]))
                arguments = call["arguments"]
                self.first_record = self.first_record or str(
                    arguments.get("order_id") or arguments.get("reservation_id") or ""
                )
                self.turns.append(
                    ImportTurn(role="tool_call", tool=call["name"], args=arguments, tool_call_id=call["id"])
                )
        elif message.role == "tool" and message.requestor == "user":
            self._customer_result(message)
        elif message.role == "tool":
            self._result(message)

    def _boundary(self) -> str:
        writes, self.step_writes = self.step_writes, []
        if writes:
            return STEP_BOUNDARY.get(verb(writes[-1]), "action_recorded")
        return "reply_sent"

    @staticmethod
    def _match(pending: list[_Pending], call_id: str, name: str) -> _Pending | None:
        """By id (the oldest unanswered call with it), else by the tool it names, else by order."""
        for wanted in (lambda p: bool(call_id) and p.id == call_id, lambda p: bool(name) and p.name == name):
            for index, candidate in enumerate(pending):
                if wanted(candidate):
                    return pending.pop(index)
        return pending.pop(0) if pending else None

    def _customer_result(self, message: _Message) -> None:
        call = self._match(self.user_pending, message.tool_call_id, message.name)
        name = call.name if call else (message.name or "a tool")
        args = json.dumps(call.arguments) if call and call.arguments else ""
        turn = ImportTurn(
            role="customer",
            content=f"[on the customer's phone: {name}({args})] {message.content or '(no output)'}",
        )
        paid = PAYMENT_MADE.search(message.content.strip())
        if call and is_write(call.name) and paid and not message.error:
            charged = to_cents(paid.group(1))
            self.ledger.charged_cents += charged
            turn.events.append(
                self._event(
                    call, item=paid.group(2), refunded=0, args={"charged_cents": charged, "by": "customer"}
                )
            )
        self.turns.append(turn)

    def _result(self, message: _Message) -> None:
        call = self._match(self.pending, message.tool_call_id, message.name)
        turn = ImportTurn(
            role="tool_result",
            tool=call.name if call else message.name,
            content=message.content,
            tool_call_id=call.id if call else message.tool_call_id,
        )
        parsed = _json_object(message.content)
        failed = message.error or message.content.lstrip().startswith("Error")
        if call and is_write(call.name) and not failed:
            turn.events.append(self._action(call, parsed, message.content))
            self.step_writes.append(call.name)
        elif parsed is not None:
            self._money(parsed)  # a read shows the record: later writes move only what is new
        self.turns.append(turn)

    def _action(self, call: _Pending, result: dict[str, Any] | None, text: str) -> ImportEvent:
        args: dict[str, Any] = dict(call.arguments)
        refunded = charged = 0
        item = item_for(call.name, call.arguments, result)
        if result is not None:
            refunded, charged = self._money(result)
            returned = set(result.get("return_items") or [])
            if returned:
                args["refund_due_cents"] = sum(
                    to_cents(i.get("price", 0))
                    for i in result.get("items") or []
                    if i.get("item_id") in returned
                )
            if result.get("exchange_price_difference") is not None:
                args["price_difference_cents"] = to_cents(result["exchange_price_difference"])
            if verb(call.name) == "refuel" and result.get("charge") is not None:
                charged += to_cents(result["charge"])
        if call.name == "send_certificate":
            refunded += to_cents(call.arguments.get("amount", 0))
            named = CERTIFICATE.search(text)
            if named:
                args["certificate_id"] = named.group(1)
        self.ledger.refunded_cents += refunded
        self.ledger.charged_cents += charged
        if charged:
            args["charged_cents"] = charged
        return self._event(call, item=item, refunded=refunded, args=args)

    def _event(self, call: _Pending, *, item: str, refunded: int, args: dict[str, Any]) -> ImportEvent:
        reversible = verb(call.name) in REVERSIBLE_VERBS
        key = (call.name, item)
        self.done[key] += 1
        repeat = self.done[key] > 1 and not reversible
        return ImportEvent(
            type="action_taken",
            tool=call.name,
            item=item,
            amount_cents=refunded,
            reversible=reversible,
            args=args,
            idempotency_key=f"{self.ticket_id}-{len(self.turns) + 1}-{call.id}"[:255],
            repeat_of_earlier=repeat,
            reason=f"the transcript shows another successful {call.name} on {item}" if repeat else "",
        )

    def _money(self, result: dict[str, Any]) -> tuple[int, int]:
        """(refunded, charged) cents: the payment_history entries new since the record was last shown."""
        history = result.get("payment_history")
        record = next((str(result[k]) for k in RECORD_KEYS if result.get(k)), "")
        if not isinstance(history, list) or not record:
            return 0, 0
        seen = Counter(json.dumps(e, sort_keys=True) for e in self.records.get(record, []))
        self.records[record] = list(history)
        refunded = charged = 0
        for entry in history:
            if not isinstance(entry, dict):
                continue
            fingerprint = json.dumps(entry, sort_keys=True)
            if seen[fingerprint]:
                seen[fingerprint] -= 1
                continue
            amount = to_cents(entry.get("amount", 0))
            kind = str(entry.get("transaction_type", ""))
            if kind == "refund" or (not kind and amount < 0):
                refunded += abs(amount)
            elif kind == "payment" or (not kind and amount > 0):
                charged += abs(amount)
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
    policy: str,
    policy_source: str,
    budget: int,
    source: dict[str, Any],
) -> ImportTicket:
    builder = _Builder(ticket_id)
    for raw in messages:
        message = _normalize(raw)
        if message.role != "system":
            builder.add(message)
    turns = builder.turns
    if not turns:
        raise TauFormatError(f"{ticket_id}: the transcript has no messages")
    first_customer = next((t for t in turns if t.role == "customer"), turns[0])
    first_customer.events[:0] = [ImportEvent(type="constraint_stated", text=text) for text in constraints]
    policy_tokens = count_message(policy) if policy else 0
    return ImportTicket.model_validate(
        {
            "ticket_id": ticket_id[:64],
            "order_id": (builder.first_record or "n/a")[:64],
            "seller_type": domain[:40] or "tau",
            "ticket_class": ImportClass(
                slug=f"tau-{domain}-{policy_tokens + budget}",
                token_budget=policy_tokens + budget,
                compaction_threshold=DEFAULT_THRESHOLD,
                # The adapter records money back to the customer as an action's amount: a flight change
                # that refunds a price difference is a refund tool here (what it charges stays in its args).
                money_tools={**default_money_tools(), "update_reservation_flights": "refund"},
            ),
            "system_prompt": policy or None,
            "turns": turns,
            "source": {
                **source,
                "domain": domain,
                "policy_source": policy_source,
                "policy_tokens": policy_tokens,
                "money": builder.ledger.as_json(),
            },
        }
    )


def _policy(found: str, domain: str) -> tuple[str, str]:
    if found.strip():
        return found, "transcript"
    fixture = fixture_policy(domain)
    return fixture, (f"evals/fixtures/policies/{domain}.md" if fixture else "none")


def tau2_documents(data: dict[str, Any], *, budget: int = DEFAULT_BUDGET) -> list[ImportTicket]:
    """A tau2-bench results file (`{"info", "tasks": [...], "simulations": [...]}`): one ticket per simulation."""
    if not is_tau2(data):
        raise TauFormatError("not a tau2-bench results file: no 'simulations' list")
    environment = ((data.get("info") or {}).get("environment_info")) or {}
    tasks = {str(t.get("id")): t for t in data.get("tasks") or [] if isinstance(t, dict)}
    documents = []
    for simulation in data["simulations"]:
        task_id = str(simulation.get("task_id"))
        task = tasks.get(task_id, {})
        messages = [m for m in simulation.get("messages") or [] if isinstance(m, dict)]
        instructions = (task.get("user_scenario") or {}).get("instructions") or {}
        if isinstance(instructions, str):
            constraints = brief_sentences(instructions)
            named = ""
        else:
            constraints = brief_sentences(instructions.get("reason_for_call")) + brief_sentences(
                instructions.get("task_instructions")
            )
            named = str(instructions.get("domain") or "")
        domain = str(environment.get("domain_name") or named or domain_of_tools(_call_names(messages)))
        policy, policy_source = _policy(str(environment.get("policy") or ""), domain)
        sim_id = str(simulation.get("id") or "")
        documents.append(
            _document(
                ticket_id=f"tau2-{domain}-{task_id}-{sim_id[:8]}",
                messages=messages,
                constraints=constraints,
                domain=domain,
                policy=policy,
                policy_source=policy_source,
                budget=budget,
                source={
                    "format": "tau2-bench",
                    "task_id": task_id,
                    "simulation_id": sim_id,
                    "reward": (simulation.get("reward_info") or {}).get("reward"),
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
        messages = [m for m in run.get("traj") or [] if isinstance(m, dict)]
        wiki = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
        domain = domain_of_policy(wiki) or domain_of_tools(_call_names(messages))
        policy, policy_source = _policy(wiki, domain)
        base = f"tau-{domain}-{run.get('task_id')}-trial{run.get('trial', 0)}"
        seen[base] += 1
        documents.append(
            _document(
                ticket_id=base if seen[base] == 1 else f"{base}-{seen[base]}",
                messages=messages,
                constraints=brief_sentences(task.get("instruction")),
                domain=domain,
                policy=policy,
                policy_source=policy_source,
                budget=budget,
                source={"format": "tau-bench", "task_id": run.get("task_id"), "reward": run.get("reward")},
            )
        )
    return documents


def tau_documents(data: Any, *, budget: int = DEFAULT_BUDGET) -> list[ImportTicket]:
    if is_tau2(data):
        return tau2_documents(data, budget=budget)
    if is_tau1(data):
        return tau1_documents(data, budget=budget)
    raise TauFormatError("neither a tau2-bench nor a tau-bench results file")


def source_of(doc: ImportTicket) -> dict[str, Any]:
    """The `source` block an adapted document carries ({} for a sundry-ticket/1 document without one)."""
    source = (doc.model_extra or {}).get("source")
    return source if isinstance(source, dict) else {}


def is_adapted(doc: ImportTicket) -> bool:
    return source_of(doc).get("format") in {"tau-bench", "tau2-bench"}
