"""A real OpenAI-compatible chat-completions server on loopback, scripted by the test.

This is the one edge the desk does not own, so the tests fake it, but over real HTTP: the official
`openai` client talks to it exactly as it would to a provider.
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
class Reply:
    """One scripted answer: `content` as the assistant message, or an HTTP error, or a delay."""

    content: str = ""
    status: int = 200
    delay: float = 0.0
    # After the 200 and its headers, the body one byte every `drip` seconds (a per-read timeout never trips).
    drip: float = 0.0
    # A body sent verbatim instead of a chat completion (an HTML page, garbage, a wrong shape).
    raw: str | None = None
    content_type: str = "application/json"
    prompt_tokens: int = 900
    completion_tokens: int = 120


@dataclass
class FakeOpenAI:
    replies: list[Reply] = field(default_factory=list)
    repeat_last: bool = True
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    def next_reply(self) -> Reply:
        if len(self.replies) > 1 or not self.repeat_last:
            return self.replies.pop(0)
        return self.replies[0]


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            fake.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            reply = fake.next_reply()
            if reply.delay:
                time.sleep(reply.delay)
            payload: dict[str, Any]
            if reply.raw is not None:
                self._send(reply.status, reply.raw.encode(), reply.content_type)
                return
            if reply.status != 200:
                payload = {"error": {"message": "scripted failure", "type": "server_error"}}
            else:
                payload = {
                    "id": f"chatcmpl-{len(fake.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply.content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": reply.prompt_tokens,
                        "completion_tokens": reply.completion_tokens,
                        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                    },
                }
            self._send(reply.status, json.dumps(payload).encode(), "application/json", drip=reply.drip)

        def _send(self, status: int, data: bytes, content_type: str, *, drip: float = 0.0) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not drip:
                    self.wfile.write(data)
                    return
                for index in range(len(data)):
                    self.wfile.write(data[index : index + 1])
                    self.wfile.flush()
                    time.sleep(drip)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    return Handler


@contextmanager
def serve(replies: list[Reply], *, repeat_last: bool = True) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(replies=list(replies), repeat_last=repeat_last)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
