"""A scripted OpenAI-compatible Chat Completions server on loopback, for the real Agents SDK Runner.

Each request takes the next scripted step: `say(text)` answers with an assistant message, `call(name,
args, call_id)` with a tool call. Every request body is kept, so a test can read exactly what the model
was sent (the desk's context, the tool results, a refusal).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def say(text: str) -> Step:
    return Step(content=text)


def call(name: str, args: dict[str, Any], call_id: str, *, text: str | None = None) -> Step:
    """A tool call; `text` is an assistant message sent with it (e.g. "Let me do that.")."""
    return Step(
        content=text,
        tool_calls=[
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    )


@dataclass
class ScriptedModel:
    steps: list[Step]
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    def messages(self, index: int) -> list[dict[str, Any]]:
        return list(self.requests[index]["messages"])

    def tool_messages(self, index: int) -> list[dict[str, Any]]:
        return [m for m in self.messages(index) if m.get("role") == "tool"]


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            model.requests.append(body)
            if not model.steps:
                payload = {"error": {"message": "the script has no more steps", "type": "server_error"}}
                self._send(500, payload)
                return
            step = model.steps.pop(0)
            message: dict[str, Any] = {"role": "assistant", "content": step.content}
            if step.tool_calls:
                message["tool_calls"] = step.tool_calls
            self._send(
                200,
                {
                    "id": f"chatcmpl-{len(model.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if step.tool_calls else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                },
            )

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def scripted_model(steps: list[Step]) -> Iterator[ScriptedModel]:
    model = ScriptedModel(steps=list(steps))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(model))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    model.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()
