"""Summarizer backends behind one small interface: given a request, return raw JSON text and usage.

Validation is not theirs: the compaction service parses every reply into `Summary`, so a backend
that returns a missing field or bad JSON produces a failed attempt, not a worse summary.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2 as httpx  # the HTTP client of the pinned openai client (its fork of httpx)
import openai  # at import, not in the first call: loading it takes seconds, inside no compaction's deadline
from django.conf import settings

from core.summary import (
    SUMMARIZER_INSTRUCTIONS,
    SUMMARY_FIELDS,
    SUMMARY_JSON_SCHEMA,
    Summary,
    summary_user_prompt,
)
from core.tokens import count_message
from core.vocabulary import TurnRole


@dataclass(frozen=True)
class SummaryRequest:
    ticket_id: str
    model: str
    pinned_state: dict[str, Any]
    previous_summary: dict[str, Any] | None
    turns: list[dict[str, Any]]  # messages: role, content, turn, tool

    def transcript(self) -> str:
        lines = []
        for message in self.turns:
            tool = f" {message['tool']}" if message.get("tool") else ""
            lines.append(f"[turn {message.get('turn')} {message['role']}{tool}] {message['content']}")
        return "\n".join(lines)

    def user_prompt(self) -> str:
        return summary_user_prompt(
            pinned_state=self.pinned_state,
            previous_summary=self.previous_summary,
            transcript=self.transcript(),
        )


@dataclass(frozen=True)
class SummarizerReply:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class SummarizerError(Exception):
    """The call itself failed (timeout, connection, HTTP error): a failed attempt."""


class Summarizer(Protocol):
    backend: str

    def summarize(self, request: SummaryRequest, *, timeout: float) -> SummarizerReply:
        """One attempt, answered within `timeout` seconds or raising SummarizerError."""
        ...


SENTENCE = re.compile(r"(.+?[.!?])(\s|$)", re.S)
NARRATIVE_CHARS = 1200


def _first_sentence(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    match = SENTENCE.match(text)
    sentence = match.group(1) if match else text
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


def pinned_references(state: dict[str, Any]) -> dict[str, list[str]]:
    """The four fields as references to the pinned items by id (A1, C2, Q1, D3).

    The pinned state rides in every request beside the summary, so restating its items word for word would
    pay for them twice; the coverage check counts a whole-word id as covering the item.
    """
    return {
        field: [str(item["id"]) for item in state.get(field, []) if item.get("id")]
        for field in SUMMARY_FIELDS
    }


class ExtractiveSummarizer:
    """Offline and deterministic: the four fields refer to the pinned state's items by id, the narrative comes
    from the transcript (the first sentence of each customer and agent turn, tool calls by name)."""

    backend = "extractive"

    def summarize(self, request: SummaryRequest, *, timeout: float = 0) -> SummarizerReply:
        state = request.pinned_state
        lines: list[str] = []
        previous = (request.previous_summary or {}).get("narrative", "")
        for message in request.turns:
            role = message["role"]
            if role == TurnRole.CUSTOMER:
                lines.append(f"Customer (turn {message['turn']}): {_first_sentence(message['content'])}")
            elif role == TurnRole.AGENT:
                lines.append(f"Agent (turn {message['turn']}): {_first_sentence(message['content'])}")
            elif role == TurnRole.TOOL_CALL:
                lines.append(f"Agent called {message.get('tool') or 'a tool'} (turn {message['turn']}).")
        narrative = " ".join(lines)
        if previous:
            narrative = f"{previous} {narrative}"
        if len(narrative) > NARRATIVE_CHARS:
            narrative = "…" + narrative[-(NARRATIVE_CHARS - 1) :]
        summary = Summary(**pinned_references(state), narrative=narrative)
        return SummarizerReply(text=summary.model_dump_json())


class _DeadlineStream(httpx.SyncByteStream):
    """A response body that stops at the deadline, however slowly the server sends it (one byte every
    few seconds after its 200 never trips a per-read timeout)."""

    def __init__(self, stream: httpx.SyncByteStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            if time.monotonic() > self._deadline:
                raise httpx.ReadTimeout("the compaction deadline passed while the body was arriving")
            yield chunk

    def close(self) -> None:
        self._stream.close()


class _DeadlineTransport(httpx.HTTPTransport):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self._deadline = deadline

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if time.monotonic() > self._deadline:
            raise httpx.ConnectTimeout("the compaction deadline passed before the request was sent")
        response = super().handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _DeadlineStream(response.stream, self._deadline)
        return response


def within(seconds: float, call: Callable[[], SummarizerReply], *, what: str) -> SummarizerReply:
    """`call()`'s reply if it comes within `seconds` of wall-clock time, else SummarizerError at once.

    The call runs in a daemon thread and is abandoned at the deadline (connect, headers and body alike:
    a server that hangs or drip-feeds cannot hold the caller); it holds nothing of ours (no transaction,
    no lock), and its own transport stops it soon after.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["reply"] = call()
        except BaseException as exc:  # handed to the caller's thread, which decides
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="summarizer-call", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise SummarizerError(f"{what} timed out: no complete answer within the {seconds:.1f}s deadline")
    if "error" in outcome:
        raise outcome["error"]
    reply: SummarizerReply = outcome["reply"]
    return reply


class OpenAISummarizer:
    """Any OpenAI-compatible chat-completions server, through the official client.

    The client reads OPENAI_BASE_URL and OPENAI_API_KEY; the model comes from the ticket class.
    Retries are the compaction service's (each one is an attempt on the event), not the client's.
    `timeout` is wall-clock time for the whole call (connect, headers and body), not per read.
    """

    backend = "openai"

    def summarize(self, request: SummaryRequest, *, timeout: float) -> SummarizerReply:
        timeout = min(timeout, settings.SUNDRY_SUMMARIZER_TIMEOUT_SECONDS)
        deadline = time.monotonic() + timeout
        return within(timeout, lambda: self._call(request, timeout, deadline), what="summarizer")

    def _call(self, request: SummaryRequest, timeout: float, deadline: float) -> SummarizerReply:
        try:
            client = openai.OpenAI(
                timeout=timeout,
                max_retries=0,
                http_client=httpx.Client(transport=_DeadlineTransport(deadline), timeout=timeout),
            )
        except openai.OpenAIError as exc:  # e.g. no OPENAI_API_KEY in the environment
            raise SummarizerError(f"OpenAI client not configured: {exc}") from exc
        try:
            completion = client.chat.completions.create(
                model=request.model,
                temperature=0,
                messages=[
                    {"role": "system", "content": SUMMARIZER_INSTRUCTIONS},
                    {"role": "user", "content": request.user_prompt()},
                ],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "ticket_summary", "strict": True, "schema": SUMMARY_JSON_SCHEMA},
                },
            )
        except openai.APITimeoutError as exc:
            raise SummarizerError(f"summarizer timed out after {timeout:.1f}s") from exc
        except openai.APIError as exc:
            raise SummarizerError(f"summarizer call failed: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # an edge we do not own: a body that is not JSON at all, say
            raise SummarizerError(f"summarizer reply unreadable: {type(exc).__name__}: {exc}") from exc
        finally:
            client.close()
        return _reply_of(completion)


def _reply_of(completion: Any) -> SummarizerReply:
    """The text and usage of a chat completion, or SummarizerError when the reply is not one.

    The client hands back whatever the server sent when it is not the documented shape (an HTML page
    parsed as a string, a JSON object without choices): each of those is a failed attempt.
    """
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        kind = type(completion).__name__
        raise SummarizerError(f"summarizer reply is not a chat completion with choices (got {kind})")
    message = getattr(choices[0], "message", None)
    text = getattr(message, "content", None)
    if not isinstance(text, str):
        raise SummarizerError("summarizer reply has no message content")
    usage = getattr(completion, "usage", None)
    return SummarizerReply(
        text=text,
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
    )


# Fixed summaries the `scripted` backend replays, by the class's `summarizer_model`. The seed's T-40118
# summary is accurate, fluent and missing the only fact with money attached: the $40 refund at turn 6.
SCRIPTS: dict[str, Summary] = {
    "seed-lossy-t40118": Summary(
        decisions=[],
        actions_taken=[],
        customer_constraints=["declined a replacement"],
        open_questions=[],
        narrative=(
            "The buyer reported cosmetic damage to the table and declined a replacement. A parasol from "
            "the same seller was delayed in transit and held for inspection. The agent is tracking the parcel."
        ),
    ),
}


class ScriptedSummarizer:
    """Replays a fixed summary, whatever the transcript: the demo's and the tests' summarizer that a
    real model would be, down to its mistakes. The script is the class's `summarizer_model`; usage is
    the token count of the prompt it was given and of the reply, so cost is figured as for a model."""

    backend = "scripted"

    def summarize(self, request: SummaryRequest, *, timeout: float = 0) -> SummarizerReply:
        script = SCRIPTS.get(request.model)
        if script is None:
            known = ", ".join(sorted(SCRIPTS))
            raise SummarizerError(f"no scripted summary named {request.model!r} (known: {known})")
        text = script.model_dump_json()
        return SummarizerReply(
            text=text,
            input_tokens=count_message(SUMMARIZER_INSTRUCTIONS) + count_message(request.user_prompt()),
            output_tokens=count_message(text),
        )


def get_summarizer(backend: str) -> Summarizer:
    if backend == "openai":
        return OpenAISummarizer()
    if backend == "extractive":
        return ExtractiveSummarizer()
    if backend == "scripted":
        return ScriptedSummarizer()
    raise ValueError(f"unknown summarizer backend {backend!r}")
