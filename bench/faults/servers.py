"""gunicorn as deployed (deploy/gunicorn.conf.py, the production settings) on a loopback port, and the faults done
to it: a worker killed with SIGKILL, the master sent HUP, the master stopped and started again.

Workers are found through /proc (Linux): the processes whose parent is the master.
"""

from __future__ import annotations

import http.client
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection

GUNICORN_CONF = Path(settings.BASE_DIR) / "deploy" / "gunicorn.conf.py"


def free_port() -> int:
    """A loopback port free right now (the OS's choice), for a server started next."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def database_url() -> str:
    """The URL of the database this process uses (the test database under pytest), for the servers."""
    db = connection.settings_dict
    if db["ENGINE"] != "django.db.backends.postgresql":
        raise RuntimeError("the deployed servers run on PostgreSQL: set DATABASE_URL=postgres://...")
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def production_env(*, static_root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a production deploy on loopback: plain HTTP (as behind a TLS proxy that redirects
    itself), a fresh long secret key, the process's database."""
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "sundry.settings",
            "SUNDRY_ENV": "production",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DEBUG": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DATABASE_URL": database_url(),
            "STATIC_ROOT": str(static_root),
            "SECURE_SSL_REDIRECT": "0",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(settings.BASE_DIR),
            "PYTHONUNBUFFERED": "1",  # the access log reaches its file line by line
        }
    )
    env.update(extra or {})
    return env


@dataclass
class Gunicorn:
    """A running gunicorn master started with deploy/gunicorn.conf.py; `restart()` starts a new one on its port."""

    port: int
    workers: int
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    killed: list[int] = field(default_factory=list)

    def start(self, *, wait: float = 60.0) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "-c",
                    str(GUNICORN_CONF),
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "--workers",
                    str(self.workers),
                    "--access-logfile",
                    "-",
                ],
                cwd=settings.BASE_DIR,
                env=self.env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        wait_until_answering(self.port, self.process, wait=wait)

    @property
    def master(self) -> int:
        assert self.process is not None
        return self.process.pid

    def worker_pids(self) -> list[int]:
        return children(self.master)

    def kill_worker(self, pid: int) -> bool:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.killed.append(pid)
        return True

    def hup(self) -> None:
        """Reload: gunicorn starts new workers and stops the old ones gracefully."""
        os.kill(self.master, signal.SIGHUP)

    def restart(self, *, wait: float = 60.0) -> None:
        """Stop the master (graceful: workers finish their requests) and start a new one on the same port."""
        self.stop()
        self.start(wait=wait)
        self.restarts += 1

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def wait_until_answering(port: int, process: subprocess.Popen[bytes], *, wait: float) -> None:
    """Until the server answers HTTP (any status): a worker loads the app after the fork."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/v1/tickets/-/state/")
            conn.getresponse().read()
            conn.close()
            return
        except (OSError, http.client.HTTPException):
            time.sleep(0.2)
    raise RuntimeError(f"the server on port {port} did not answer within {wait:.0f}s")
