"""Round trips counted on the wire: a tiny TCP proxy in front of PostgreSQL.

The desk's server is pointed at the proxy (its DATABASE_URL names the proxy's port, `sslmode=disable` so the
protocol stays readable) and every byte passes through it. It counts, over all connections:

- `round_trips`: flights, i.e. how many times a client sent something after the server last spoke (or on a
  fresh connection). A request that runs N statements one after the other is N round trips; a pipeline or a
  multi-statement string sent at once is one. Django's health check (`SELECT 1` before a request's first
  query, CONN_HEALTH_CHECKS) is a flight like any other: the ORM's query log cannot see it, the wire can.
- `statements`: simple-protocol Query messages ('Q') plus extended-protocol Execute messages ('E').
- `messages`: every frontend message by its type byte (the startup packet as "startup").

No Django here: the parser is plain bytes, tested on a real PostgreSQL connection (tests/bench/test_wire.py).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

SSL_REQUEST = 80877103
GSS_REQUEST = 80877104
CANCEL_REQUEST = 80877102


@dataclass
class FrontendParser:
    """Splits the client's byte stream into PostgreSQL frontend messages (startup first, then typed)."""

    started: bool = False
    buffer: bytearray = field(default_factory=bytearray)
    opaque: bool = False  # TLS was accepted: nothing more can be read, flights are still counted

    def feed(self, data: bytes) -> list[str]:
        """The type of each complete message in `data` (and what was buffered before), in order."""
        if self.opaque:
            return []
        self.buffer += data
        found: list[str] = []
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return found
                (length,) = struct.unpack("!I", self.buffer[:4])
                if len(self.buffer) < length:
                    return found
                (code,) = struct.unpack("!I", self.buffer[4:8])
                del self.buffer[:length]
                if code in (SSL_REQUEST, GSS_REQUEST):
                    found.append("ssl_request")  # answered with one byte; the real startup follows
                    continue
                found.append("cancel" if code == CANCEL_REQUEST else "startup")
                self.started = True
                continue
            if len(self.buffer) < 5:
                return found
            kind = chr(self.buffer[0])
            (length,) = struct.unpack("!I", self.buffer[1:5])
            if len(self.buffer) < 1 + length:
                return found
            del self.buffer[: 1 + length]
            found.append(kind)


@dataclass
class Counts:
    round_trips: int = 0
    statements: int = 0
    connections: int = 0
    messages: Counter[str] = field(default_factory=Counter)

    def minus(self, earlier: Counts) -> Counts:
        return Counts(
            round_trips=self.round_trips - earlier.round_trips,
            statements=self.statements - earlier.statements,
            connections=self.connections - earlier.connections,
            messages=self.messages - earlier.messages,
        )


class _Pair:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.parser = FrontendParser()
        self.server_spoke_last = True  # a fresh connection's first bytes are a flight
        self.awaiting_ssl_answer = False


class WireCounter:
    """A loopback proxy to `upstream` (host, port) on `port` (0: any free one); counts as it forwards.

    Use as a context manager: the proxy runs in one daemon thread and is closed on exit.
    """

    def __init__(self, upstream: tuple[str, int], port: int = 0, host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self._listener = socket.create_server((host, port))
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._counts = Counts()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="wire-counter", daemon=True)

    def __enter__(self) -> WireCounter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def snapshot(self) -> Counts:
        with self._lock:
            c = self._counts
            return Counts(c.round_trips, c.statements, c.connections, Counter(c.messages))

    def close(self) -> None:
        self._stop.set()
        self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._wake_w.close()

    def _serve(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=1.0):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    return
                else:
                    pair, from_client = key.data
                    self._forward(pair, from_client)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        upstream = socket.create_connection(self.upstream)
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(client, upstream)
        self._selector.register(client, selectors.EVENT_READ, (pair, True))
        self._selector.register(upstream, selectors.EVENT_READ, (pair, False))
        with self._lock:
            self._counts.connections += 1

    def _forward(self, pair: _Pair, from_client: bool) -> None:
        source, target = (pair.client, pair.upstream) if from_client else (pair.upstream, pair.client)
        try:
            data = source.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(pair)
            return
        if from_client:
            kinds = pair.parser.feed(data)
            with self._lock:
                if pair.server_spoke_last:
                    self._counts.round_trips += 1
                self._counts.messages.update(kinds)
                self._counts.statements += sum(k in ("Q", "E") for k in kinds)
            pair.server_spoke_last = False
            if "ssl_request" in kinds:
                pair.awaiting_ssl_answer = True
        else:
            pair.server_spoke_last = True
            if pair.awaiting_ssl_answer:
                pair.awaiting_ssl_answer = False
                if data[:1] == b"S":  # TLS from here on: the messages cannot be read
                    pair.parser.opaque = True
        try:
            target.sendall(data)
        except OSError:
            self._drop(pair)

    def _drop(self, pair: _Pair) -> None:
        for s in (pair.client, pair.upstream):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(s)
            s.close()
