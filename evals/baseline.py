"""The summary-only baseline: a rolling summary that sees only the turns, as most agent frameworks keep one.

Two kinds, never shown the pinned state, reported under their own names:

- `first-sentence` (constructed, offline and deterministic): each compaction folds the replaced turns (the
  first sentence of each customer and agent turn, each tool call with its arguments, the first words of
  each tool result) into the previous rolling summary, and keeps the newest part that fits in the same
  room the desk spends on its pinned state and summary at that compaction.
- `model` (written by a real model, `model_rolling_summary`): at each compaction the summarizer's model
  (the same OpenAI-compatible endpoint and model) gets the previous rolling summary and the replaced turns
  in LangChain's default `ConversationSummaryMemory` template ("Progressively summarize the lines of
  conversation provided, adding onto the previous summary returning a new summary") and writes the new
  summary in prose, at most as many tokens as the room above. A failed call keeps the previous summary
  (and is counted), as a framework that carries on would.

The request either leaves is the system prompt, that summary and the kept turns: no pinned state. The eval
replays the desk's own compactions (same cuts, same kept turns) with this summary in place of the desk's,
so the only difference between the columns is the pinned state (and, for `model`, who wrote the summary).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from core.context import SUMMARY_PREFIX, summary_message
from core.tokens import STATE_PREFIX
from core.vocabulary import TurnRole

SENTENCE = re.compile(r"(.+?[.!?])(\s|$)", re.S)
BASELINES = ("first-sentence", "model")
RESULT_CHARS = 120
SENTENCE_CHARS = 200
ARGS_CHARS = 200


def first_sentence(text: str, limit: int = SENTENCE_CHARS) -> str:
    text = " ".join(text.split())
    match = SENTENCE.match(text)
    sentence = match.group(1) if match else text
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


def turn_line(turn: dict[str, Any]) -> str:
    """One replaced turn as the baseline keeps it. `turn` has role, content, tool, args, number."""
    role = turn.get("role", "")
    number = turn.get("number")
    content = str(turn.get("content") or "")
    if role == TurnRole.CUSTOMER:
        return f"Customer (turn {number}): {first_sentence(content)}"
    if role == TurnRole.AGENT:
        return f"Agent (turn {number}): {first_sentence(content)}"
    if role == TurnRole.TOOL_CALL:
        args = json.dumps(turn.get("args") or {}, sort_keys=True, ensure_ascii=False)
        if len(args) > ARGS_CHARS:
            args = args[: ARGS_CHARS - 1] + "…"
        return f"Agent called {turn.get('tool') or 'a tool'}({args}) (turn {number})."
    if role == TurnRole.TOOL_RESULT:
        shown = " ".join(content.split())[:RESULT_CHARS] or "(empty)"
        return f"{turn.get('tool') or 'The tool'} returned: {shown}"
    return ""


def rolling_summary(previous: str, turns: list[dict[str, Any]], *, room_chars: int) -> str:
    """The previous summary and the replaced turns, the newest part that fits in `room_chars`."""
    lines = [line for line in (turn_line(t) for t in turns) if line]
    text = " ".join([previous, *lines]).strip() if previous else " ".join(lines)
    if len(text) > room_chars:
        text = "…" + text[-(max(room_chars, 2) - 1) :]
    return text


def baseline_summary(text: str) -> dict[str, Any]:
    """The baseline's summary as the request carries it: prose only, no structured fields."""
    return {"narrative": text}


def baseline_messages(messages: list[dict[str, Any]], text: str | None) -> list[dict[str, Any]]:
    """The desk's request with the pinned state removed and its summary replaced by the baseline's."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = str(message.get("content") or "")
        if message.get("role") == "system" and content.startswith(STATE_PREFIX):
            continue
        if message.get("role") == "system" and content.startswith(SUMMARY_PREFIX):
            if text is not None:
                out.append({"role": "system", "content": summary_message(baseline_summary(text))})
            continue
        out.append(message)
    return out


# LangChain's default rolling-summary prompt (`langchain.memory.prompt.SUMMARY_PROMPT`, MIT), as most agent
# frameworks' summary memory still ships it: an example, the current summary, the new lines.
ROLLING_TEMPLATE = """Progressively summarize the lines of conversation provided, adding onto the previous \
summary returning a new summary.

EXAMPLE
Current summary:
The human asks what the AI thinks of artificial intelligence. The AI thinks artificial intelligence is a \
force for good.

New lines of conversation:
Human: Why do you think artificial intelligence is a force for good?
AI: Because artificial intelligence will help humans reach their full potential.

New summary:
The human asks what the AI thinks of artificial intelligence. The AI thinks artificial intelligence is a \
force for good because it will help humans reach their full potential.
END OF EXAMPLE

Current summary:
{summary}

New lines of conversation:
{new_lines}

New summary:"""
MIN_SUMMARY_TOKENS = 64


def conversation_line(turn: dict[str, Any]) -> str:
    """One replaced turn as a framework's memory renders it: the whole turn, tools by name and arguments."""
    role = turn.get("role", "")
    content = " ".join(str(turn.get("content") or "").split())
    if role == TurnRole.CUSTOMER:
        return f"Human: {content}"
    if role == TurnRole.AGENT:
        return f"AI: {content}"
    if role == TurnRole.TOOL_CALL:
        args = json.dumps(turn.get("args") or {}, sort_keys=True, ensure_ascii=False)
        return f"AI called {turn.get('tool') or 'a tool'}({args})"
    if role == TurnRole.TOOL_RESULT:
        return f"Tool {turn.get('tool') or ''} returned: {content or '(empty)'}".replace("Tool  ", "Tool ")
    return ""


def rolling_prompt(previous: str, turns: list[dict[str, Any]]) -> str:
    lines = [line for line in (conversation_line(t) for t in turns) if line]
    return ROLLING_TEMPLATE.format(summary=previous or "(none yet)", new_lines="\n".join(lines))


@dataclass(frozen=True)
class RollingReply:
    """A model-written rolling summary, the server's usage and the wall-clock time; `error` when it failed
    (then `text` is the previous summary, kept)."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: int = 0
    error: str = ""


@dataclass
class ModelBaselineUsage:
    """What the model-written baseline cost a ticket: its calls, failures, the server's tokens, the time."""

    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, reply: RollingReply) -> None:
        self.calls += 1
        self.failures += bool(reply.error)
        self.input_tokens += reply.input_tokens
        self.output_tokens += reply.output_tokens
        self.latency_ms += reply.latency_ms
        if reply.error:
            self.errors.append(reply.error)

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failures": self.failures,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency_ms": self.latency_ms,
            "errors": self.errors[:3],
        }


def model_rolling_summary(
    client: Any, model: str, previous: str, turns: list[dict[str, Any]], *, max_tokens: int
) -> RollingReply:
    """The new rolling summary the model writes from the previous one and the replaced turns (prose)."""
    started = time.perf_counter()
    try:
        completion = client.chat.completions.create(
            model=model,
            temperature=0,
            max_tokens=max(MIN_SUMMARY_TOKENS, max_tokens),
            messages=[{"role": "user", "content": rolling_prompt(previous, turns)}],
        )
        text = completion.choices[0].message.content
        if not isinstance(text, str):
            raise ValueError("the reply has no message content")
    except Exception as exc:  # an edge we do not own: the summary stays what it was, the miss is counted
        return RollingReply(
            text=previous,
            latency_ms=round(1000 * (time.perf_counter() - started)),
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
    usage = getattr(completion, "usage", None)
    return RollingReply(
        text=" ".join(text.split()) or previous,
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        latency_ms=round(1000 * (time.perf_counter() - started)),
    )
