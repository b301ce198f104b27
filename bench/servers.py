"""The bench's servers: gunicorn with the production settings on a free loopback port, started and stopped
around the measurements.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

_taken: set[int] = set()


def free_port() -> int:
    """A free loopback port: from BENCH_PORTS (`9400-9449`) when set, each handed out once per run; else any."""
    wanted = os.environ.get("BENCH_PORTS", "").strip()
    candidates: list[int] = [0]
    if wanted:
        low, _, high = wanted.partition("-")
        candidates = [p for p in range(int(low), int(high or low) + 1) if p not in _taken]
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            found = int(s.getsockname()[1])
        _taken.add(found)
        return found
    raise RuntimeError(f"no free port in BENCH_PORTS={wanted}")


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]


def _static_root() -> Path:
    root = Path(settings.BASE_DIR) / "var" / "bench-static"
    root.mkdir(parents=True, exist_ok=True)
    return root


def server_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": os.environ["DATABASE_URL"],
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "SUNDRY_ENV": "production",
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(settings.BASE_DIR),
            # Production serves collected static files; the bench serves none, so an empty directory will do.
            "STATIC_ROOT": str(_static_root()),
            # Plain HTTP on loopback, as behind a TLS proxy that redirects itself: without this every request
            # is answered with the 301 to https, which would be measured instead of the endpoint.
            "SECURE_SSL_REDIRECT": "0",
        }
    )
    env.update(extra)
    return env


def start_server(name: str, app: str, env: dict[str, str], workers: int = 2) -> Server:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            app,
            "--workers",
            str(workers),
            "--worker-class",
            "sync",
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "--timeout",
            "120",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the {name} server exited with {process.returncode}")
        try:  # answering HTTP (any status), not just accepting: a worker loads the app after the fork
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/v1/tickets/-/state/")
            conn.getresponse().read()
            conn.close()
            return Server(name, port, process)
        except (OSError, http.client.HTTPException):
            time.sleep(0.2)
    process.terminate()
    raise RuntimeError(f"the {name} server did not start")


@contextmanager
def servers(specs: dict[str, tuple[str, dict[str, str]]], workers: int = 2) -> Iterator[dict[str, Server]]:
    started: dict[str, Server] = {}
    try:
        for name, (app, env) in specs.items():
            started[name] = start_server(name, app, env, workers)
        yield started
    finally:
        for server in started.values():
            server.process.terminate()
        for server in started.values():
            try:
                server.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.process.kill()


def worker_rss_kb(server: Server) -> list[int]:
    """VmRSS of each of the server's gunicorn workers (the master's children), in kB, from /proc."""
    sizes = []
    for pid in _children(server.process.pid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                sizes.append(int(line.split()[1]))
    return sorted(sizes)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found += [int(p) for p in text.split()]
    return found


def raw_dsn() -> str:
    db = settings.DATABASES["default"]
    return (
        f"host={db['HOST'] or 'localhost'} port={db['PORT'] or 5432} dbname={db['NAME']} "
        f"user={db['USER']} password={db['PASSWORD']}"
    )
