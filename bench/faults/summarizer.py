"""A loopback OpenAI-compatible summarizer that hangs: every other call is held open without an answer (until the
desk's deadline abandons it); the others answer a valid summary. The fault the desk's deadline and lease exist for.
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

SUMMARY = json.dumps(
    {
        "decisions": [],
        "actions_taken": [],
        "customer_constraints": [],
        "open_questions": [],
        "narrative": "The customer and the agent exchanged messages; the pinned state holds what was done.",
    }
)
HANG_SECONDS = 120.0


@dataclass
class HangingSummarizer:
    port: int
    calls: int = 0
    hung: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def should_hang(self) -> bool:
        with self.lock:
            self.calls += 1
            hang = self.calls % 2 == 1
            self.hung += hang
            return hang


def _handler(summarizer: HangingSummarizer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if summarizer.should_hang():
                summarizer.stopping.wait(HANG_SECONDS)  # no status line, no byte: a hang
                return
            payload = {
                "id": f"chatcmpl-{summarizer.calls}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "hanging"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": SUMMARY},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
            }
            data = json.dumps(payload).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


@contextmanager
def hanging_summarizer(port: int) -> Iterator[HangingSummarizer]:
    summarizer = HangingSummarizer(port=port)
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(summarizer))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield summarizer
    finally:
        summarizer.stopping.set()
        server.shutdown()
        server.server_close()
