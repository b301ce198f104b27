"""The production deploy (deploy/nginx.conf in front of deploy/gunicorn.conf.py) against slow clients.

Debian's nginx runs the repository's config in a temporary prefix (only its paths and ports replaced) in front of
gunicorn with the production settings on PostgreSQL, two sync workers. Eight connections drip a header line a
second; a normal GET answers while they are all still connected. The same eight against gunicorn alone hold
both workers, and the GET waits for them: the proxy is what makes the difference. nginx's own refusals under
/api/ (413, 414, 431, 502) are JSON.

Skipped with the reason when nginx is not installed (`apt-get install nginx`), unless SUNDRY_REQUIRE_NGINX=1 (CI).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from bench.faults.servers import Gunicorn, free_port, production_env
from tests.factories import ensure_roles
from tickets.accounts import create_agent
from tickets.models import Ticket, TicketClass
from tickets.services.lifecycle import open_ticket

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REPO = Path(settings.BASE_DIR)
NGINX_PORT = free_port()
GUNICORN_PORT = free_port()
SLOW_CLIENTS = 8
DRIP_LINES = 6  # one a second: well inside nginx's 10 s client_header_timeout
GENEROUS = 60.0  # a socket timeout, never an assertion on speed


def nginx_binary() -> str:
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if found is None:
        message = "nginx is not installed: apt-get install nginx (Debian's package)"
        if os.environ.get("SUNDRY_REQUIRE_NGINX") == "1":
            pytest.fail(f"SUNDRY_REQUIRE_NGINX=1 but {message}", pytrace=False)
        pytest.skip(message)
    return found


def site_config(root: Path) -> str:
    """deploy/nginx.conf with its SITE paths and ports pointed into `root`; every one must be found."""
    text = (REPO / "deploy" / "nginx.conf").read_text()
    replacements = {
        "pid /run/sundry-nginx.pid;": f"pid {root}/nginx.pid;",
        "error_log /var/log/nginx/sundry-error.log warn;": f"error_log {root}/error.log warn;",
        "access_log /var/log/nginx/sundry-access.log desk;": f"access_log {root}/access.log desk;",
        "server 127.0.0.1:8001;": f"server 127.0.0.1:{GUNICORN_PORT};",
        "listen 127.0.0.1:8080;": f"listen 127.0.0.1:{NGINX_PORT};",
        "alias /srv/sundry/staticfiles/;": f"alias {root}/static/;",
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, f"deploy/nginx.conf no longer has {old!r}: update this test with it"
        text = text.replace(old, new)
    # The buffered bodies in the prefix too (Debian's build keeps them under /var/lib/nginx, root's).
    return text.replace(
        "http {\n", f"http {{\n    client_body_temp_path {root}/body;\n    proxy_temp_path {root}/proxy;\n", 1
    )


@dataclass
class Site:
    root: Path
    token: str
    gunicorn: Gunicorn
    nginx: subprocess.Popen[bytes] | None = None
    state_path: str = "/api/v1/tickets/T-SLOW/state/"


@pytest.fixture
def site() -> Iterator[Site]:
    """gunicorn (2 sync workers, production settings, this test's PostgreSQL database) with a ticket and an agent;
    nginx is started by the tests that want it."""
    nginx = nginx_binary()
    ensure_roles()
    token = create_agent(name="slow-client-agent")
    klass = TicketClass.objects.create(slug="standard-8k", token_budget=8000, compaction_threshold=0.8)
    open_ticket(ticket_id="T-SLOW", order_id="SU-1", seller_type="marketplace", ticket_class=klass)
    # nginx's workers run as www-data: the prefix must be readable by them (pytest's tmp_path is not).
    root = Path(tempfile.mkdtemp(prefix="sundry-nginx-"))
    root.chmod(0o755)
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"],
        cwd=REPO,
        env={**os.environ, "STATIC_ROOT": str(root / "static")},
        check=True,
    )
    env = production_env(
        static_root=root / "static",
        extra={"SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto", "SUNDRY_TRUSTED_PROXIES": "1"},
    )
    server = Gunicorn(port=GUNICORN_PORT, workers=2, env=env, log=root / "gunicorn.log")
    server.start()
    the_site = Site(root=root, token=token, gunicorn=server)
    try:
        (root / "nginx.conf").write_text(site_config(root))
        the_site.nginx = subprocess.Popen(
            [
                nginx,
                "-p",
                str(root),
                "-e",
                str(root / "error.log"),
                "-c",
                str(root / "nginx.conf"),
                "-g",
                "daemon off;",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(root / "nginx.stderr").open("wb"),
        )
        wait_for_port(NGINX_PORT, the_site.nginx, root / "nginx.stderr")
        yield the_site
    finally:
        if the_site.nginx is not None:
            the_site.nginx.terminate()
            the_site.nginx.wait(timeout=15)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def wait_for_port(port: int, process: subprocess.Popen[bytes], stderr: Path) -> None:
    for _ in range(100):
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited with {process.returncode}: {stderr.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            threading.Event().wait(0.1)
    raise RuntimeError("nginx did not listen")


@dataclass
class SlowClients:
    """`count` connections that send a request line, then one header line a second, then finish the request."""

    port: int
    count: int = SLOW_CLIENTS
    sockets: list[socket.socket] = field(default_factory=list)
    lines_sent: int = 0
    finished: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def start(self) -> threading.Thread:
        for i in range(self.count):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS)
            sock.sendall(
                f"GET /api/v1/tickets/T-SLOW/state/?slow={i} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
            )
            self.sockets.append(sock)
        thread = threading.Thread(target=self._drip, daemon=True)
        thread.start()
        return thread

    def _drip(self) -> None:
        tick = threading.Event()
        for line in range(DRIP_LINES):
            tick.wait(1.0)
            for sock in self.sockets:
                try:
                    sock.sendall(f"X-Drip-{line}: {'x' * 20}\r\n".encode())
                except OSError as exc:
                    self.errors.append(f"line {line}: {exc}")
            self.lines_sent = line + 1
        self.finished.set()
        for sock in self.sockets:
            try:
                sock.sendall(b"Connection: close\r\n\r\n")
            except OSError as exc:
                self.errors.append(f"end: {exc}")

    def still_connected(self) -> list[bool]:
        """Each socket: open and not answered yet (a recv would block), as opposed to closed or answered."""
        states = []
        for sock in self.sockets:
            sock.setblocking(False)
            try:
                sock.recv(1)  # bytes: answered; b"": closed
                states.append(False)
            except BlockingIOError:
                states.append(True)
            finally:
                sock.setblocking(True)
        return states

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@dataclass
class Get:
    """A normal GET of the ticket's state in a thread; `answered_while_dripping` says whether its answer came
    before the slow clients finished their requests."""

    port: int
    path: str
    token: str
    slow: SlowClients
    status: int | None = None
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    answered_while_dripping: bool | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=GENEROUS)
        try:
            conn.request("GET", self.path, headers={"Authorization": f"Token {self.token}"})
            response = conn.getresponse()
            self.body = response.read()
            self.answered_while_dripping = not self.slow.finished.is_set()
            self.status = response.status
            self.headers = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
            self.done.set()


def get_while_slow_clients_drip(port: int, site: Site) -> tuple[Get, SlowClients, list[bool]]:
    slow = SlowClients(port)
    drip = slow.start()
    try:
        while slow.lines_sent < 2:  # the slow clients are well into their headers
            threading.Event().wait(0.1)
        get = Get(port, site.state_path, site.token, slow)
        getter = threading.Thread(target=get.run, daemon=True)
        getter.start()
        # Whichever comes first: the GET's answer, or the slow clients finishing their requests.
        while not get.done.is_set() and not slow.finished.is_set():
            get.done.wait(0.1)
        connected = slow.still_connected() if get.done.is_set() and not slow.finished.is_set() else []
        drip.join(timeout=GENEROUS)
        getter.join(timeout=GENEROUS)
        return get, slow, connected
    finally:
        slow.close()


def test_a_get_answers_through_nginx_while_eight_slow_clients_are_connected(site: Site) -> None:
    """Eight connections dripping a header line a second, two sync workers: through nginx the GET answers 200
    while all eight are still connected and unanswered (nginx holds them; no worker ever sees them)."""
    get, slow, connected = get_while_slow_clients_drip(NGINX_PORT, site)
    assert get.status == 200, (get.status, get.body[:300])
    assert json.loads(get.body)["ticket"] == "T-SLOW"
    assert get.answered_while_dripping is True
    assert connected == [True] * SLOW_CLIENTS, f"slow clients open and unanswered: {connected} {slow.errors}"
    assert not slow.errors, slow.errors
    # The request id nginx made reaches gunicorn's access log.
    request_id = get.headers["x-request-id"]
    assert f"id={request_id}" in (site.root / "gunicorn.log").read_text()


def test_the_same_slow_clients_hold_gunicorn_alone(site: Site) -> None:
    """The control: straight to gunicorn's two sync workers, the same eight slow clients hold both, and the GET
    only answers after they have finished their requests (why the deploy puts nginx in front)."""
    get, slow, _ = get_while_slow_clients_drip(GUNICORN_PORT, site)
    assert slow.finished.is_set()
    assert get.answered_while_dripping is False, "gunicorn answered while its workers read slow clients"
    assert get.status == 200, (get.status, get.body[:300])


def raw_exchange(request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as it is and read nginx's answer (it may refuse before the request is complete)."""
    with socket.create_connection(("127.0.0.1", NGINX_PORT), timeout=GENEROUS) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    for line in head.split("\r\n"):
        if line.startswith("content-length:"):
            return int(line.split(":", 1)[1])
    return 1 << 30


def test_nginx_own_refusals_under_api_are_json(site: Site) -> None:
    """What nginx answers itself under /api/ is JSON with an error code and a message: a body over the desk's
    256 KiB (413, refused from its Content-Length before any byte of it), a request line or a header over 4 KiB
    (414, 431), and the desk down (502). A body at the limit and a chunked body reach the desk. The static files
    come from collectstatic's directory."""
    too_large = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    cases = {
        413: (
            f"POST /api/v1/tickets/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {too_large}\r\nConnection: close\r\n\r\n"
        ).encode(),
        414: b"GET /api/v1/tickets/"
        + b"T" * 5000
        + b"/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        431: b"GET /api/v1/tickets/T-SLOW/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
        + b"b" * 5000
        + b"\r\nConnection: close\r\n\r\n",
    }
    for expected, request in cases.items():
        status, headers, body = raw_exchange(request)
        assert status == expected, (expected, status, body[:200])
        assert headers["content-type"] == "application/json", (expected, headers)
        answer = json.loads(body)
        assert answer["error"] and answer["message"], answer

    # A body at the limit goes through to the desk, which answers it (its own JSON 400: not a ticket).
    at_limit = b'{"ticket_id": "' + b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - 100) + b'"}'
    status, headers, body = raw_exchange(
        b"POST /api/v1/tickets/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Token {site.token}\r\nContent-Length: {len(at_limit)}\r\nConnection: close\r\n\r\n".encode()
        + at_limit
    )
    assert status == 400 and json.loads(body)["error"], (status, body[:300])

    # A chunked body is read whole by nginx and reaches the desk with a Content-Length (the desk alone refuses
    # chunked bodies with 411, never reading them as empty).
    ticket = b'{"ticket_id": "T-CHUNKED", "order_id": "SU-2", "seller_type": "marketplace", "ticket_class": "standard-8k"}'
    chunks = (
        b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (ticket[:40], ticket[40:])) + b"0\r\n\r\n"
    )
    status, headers, body = raw_exchange(
        b"POST /api/v1/tickets/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Token {site.token}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
        + chunks
    )
    assert status == 201, (status, body[:300])
    assert Ticket.objects.filter(ticket_id="T-CHUNKED").exists()

    status, headers, body = raw_exchange(
        b"GET /static/desk.css HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    assert status == 200 and headers["content-type"].startswith("text/css")
    assert body == (site.root / "static" / "desk.css").read_bytes()
    assert "/static/desk.css" not in (site.root / "gunicorn.log").read_text()

    site.gunicorn.stop()
    status, headers, body = raw_exchange(
        b"GET /api/v1/tickets/T-SLOW/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    assert status == 502 and headers["content-type"] == "application/json", (status, headers)
    assert json.loads(body)["error"] == "desk_unavailable"
    assert headers["retry-after"] == "5"
