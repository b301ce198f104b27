"""Does compaction change outcomes? Decision questions asked of a working model with three contexts.

At a compaction, the questions the rest of the ticket depends on are built from the pinned state (what was
done, what the customer said, what is awaited) and put to the working model (any OpenAI-compatible server:
`OPENAI_BASE_URL`, the local model by default) three times: with the full uncompacted transcript, with the
desk's assembled request, and with the baseline's (its rolling summary, no pinned state). Each answer is
`yes` or `no` under a JSON schema. Reported per context: agreement with the ground truth, agreement with the
full-context answer, and the repeat irreversible actions the model would have attempted ("may I refund it
again?" answered yes). With a 135M model the figures are a floor; the harness is the point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTEXTS = ("full", "desk", "baseline")
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
ROLE = {"system": "system", "customer": "user", "agent": "assistant"}


@dataclass(frozen=True)
class Question:
    kind: str  # done, repeat, constraint, awaited
    text: str
    truth: str  # yes or no
    repeat_of: str = ""  # for `repeat`: the irreversible action a `yes` would repeat


def questions_for(state: dict[str, Any]) -> list[Question]:
    """The decision questions a pinned state answers: for each succeeded action, has it been done (yes) and
    may it be done again without a deliberate-repeat reason (no); each constraint (yes); each open question."""
    out: list[Question] = []
    for action in state.get("actions_taken", []):
        if action.get("status", "succeeded") != "succeeded" or action.get("reversed"):
            continue
        what = f"{action['tool']} for {action.get('item') or 'this ticket'}"
        money = f" ({action['amount_cents'] / 100:.2f} USD)" if action.get("amount_cents") else ""
        out.append(Question("done", f"Has the agent already done {what}{money}?", "yes"))
        out.append(Question("repeat", f"Should the agent do {what}{money} again now?", "no", repeat_of=what))
    for constraint in state.get("customer_constraints", []):
        out.append(Question("constraint", f"Did the customer say this: {constraint['text']!r}?", "yes"))
    for question in state.get("open_questions", []):
        out.append(Question("awaited", f"Is the ticket still waiting for this: {question['text']!r}?", "yes"))
    return out


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A desk request (or transcript) as chat messages: tool calls and results as user-visible notes."""
    out = []
    for message in messages:
        role = ROLE.get(str(message.get("role")), "user")
        content = str(message.get("content") or "")
        if message.get("role") in ("tool_call", "tool_result"):
            content = f"[{message['role']} {message.get('tool') or ''}] {content}"
        out.append({"role": role, "content": content})
    return out


def ask(client: Any, model: str, messages: list[dict[str, Any]], question: Question) -> str:
    """The model's yes/no answer, or "?" when the call fails or the reply is not one."""
    import json

    prompt = f'Answer about this support ticket with yes or no, as JSON {{"answer": ...}}. {question.text}'
    try:
        completion = client.chat.completions.create(
            model=model,
            temperature=0,
            max_tokens=16,
            messages=[*chat_messages(messages), {"role": "user", "content": prompt}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "answer", "strict": True, "schema": ANSWER_SCHEMA},
            },
        )
        answer = json.loads(completion.choices[0].message.content or "{}").get("answer")
    except Exception:  # an edge we do not own: any failure is an unanswered question
        return "?"
    return answer if answer in ("yes", "no") else "?"


@dataclass
class OutcomeTally:
    asked: int = 0
    right: int = 0
    agrees_with_full: int = 0
    repeats_attempted: int = 0
    unanswered: int = 0

    def add(self, other: OutcomeTally) -> None:
        for name in ("asked", "right", "agrees_with_full", "repeats_attempted", "unanswered"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_json(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "agreement_with_truth": round(self.right / self.asked, 4) if self.asked else None,
            "agreement_with_full": round(self.agrees_with_full / self.asked, 4) if self.asked else None,
            "repeat_irreversible_attempted": self.repeats_attempted,
            "unanswered": self.unanswered,
        }


@dataclass
class Outcomes:
    tallies: dict[str, OutcomeTally] = field(default_factory=lambda: {c: OutcomeTally() for c in CONTEXTS})

    def add(self, other: Outcomes) -> None:
        for name in CONTEXTS:
            self.tallies[name].add(other.tallies[name])

    def as_json(self) -> dict[str, Any]:
        return {name: self.tallies[name].as_json() for name in CONTEXTS}


def measure(
    client: Any, model: str, questions: list[Question], contexts: dict[str, list[dict[str, Any]]]
) -> Outcomes:
    """Every question with each of the three contexts (`full`, `desk`, `baseline`)."""
    outcomes = Outcomes()
    # One context at a time, all its questions: a local server reuses the prompt prefix it just read.
    asked = {name: [ask(client, model, contexts[name], q) for q in questions] for name in CONTEXTS}
    for index, question in enumerate(questions):
        answers = {name: asked[name][index] for name in CONTEXTS}
        for name in CONTEXTS:
            tally = outcomes.tallies[name]
            tally.asked += 1
            tally.right += answers[name] == question.truth
            tally.agrees_with_full += answers[name] == answers["full"]
            tally.unanswered += answers[name] == "?"
            tally.repeats_attempted += question.kind == "repeat" and answers[name] == "yes"
    return outcomes
