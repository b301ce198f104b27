"""A tiny TCP proxy on loopback that misbehaves on purpose, in front of the live desk.

Each new client connection is handled by the next scripted fault (then by plain forwarding):
- "refuse": accept and close at once; the request never reaches the desk;
- "lose_response": forward the request, let the desk answer, and close without passing the answer on
  (the desk did the work; the client cannot know);
- "503": answer `503 Service Unavailable` (JSON, `Retry-After: 0`) without forwarding.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def _read_request(conn: socket.socket) -> bytes:
    """One HTTP/1.1 request (headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@dataclass
class FlakyProxy:
    upstream: tuple[str, int]
    faults: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)  # what happened to each connection
    requests_lost: list[bytes] = field(default_factory=list)
    url: str = ""

    def handle(self, conn: socket.socket) -> None:
        fault = self.faults.pop(0) if self.faults else "forward"
        self.seen.append(fault)
        if fault == "refuse":
            conn.close()
            return
        if fault == "503":
            _read_request(conn)
            body = b'{"error": "unavailable", "message": "scripted outage"}'
            conn.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 0\r\n"
                b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            conn.close()
            return
        upstream = socket.create_connection(self.upstream)
        if fault == "lose_response":
            request = _read_request(conn)
            self.requests_lost.append(request)
            upstream.sendall(request)
            upstream.recv(65536)  # the desk has answered: the work is done
            upstream.close()
            conn.close()
            return
        threading.Thread(target=_pipe, args=(conn, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, conn), daemon=True).start()


@contextmanager
def flaky_proxy(upstream_url: str, faults: list[str]) -> Iterator[FlakyProxy]:
    host_port = upstream_url.split("://", 1)[1].rstrip("/")
    host, _, port = host_port.partition(":")
    proxy = FlakyProxy(upstream=(host, int(port)), faults=list(faults))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    proxy.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    stopped = threading.Event()

    def serve() -> None:
        while not stopped.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=proxy.handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        stopped.set()
        listener.close()
        thread.join(timeout=2)
