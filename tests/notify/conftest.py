"""A real loopback HTTP receiver (http.server in a thread), scripted answer by answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False  # wait (up to 10 s, or until the test ends) before answering


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.received: list[Received] = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                index = len(receiver.received) - 1
                answer = receiver.answers[min(index, len(receiver.answers) - 1)]
                if answer.hang:
                    receiver.release.wait(10)
                self.send_response(answer.status)
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}/hooks/sundry"

    def start(self) -> Receiver:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[object]:
    """`receiver([Answer(500), Answer(200)])` starts one; every receiver started is stopped at the end."""
    started: list[Receiver] = []

    def start(answers: list[Answer] | None = None) -> Receiver:
        r = Receiver(answers or [Answer()]).start()
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()
