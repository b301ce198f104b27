"""Load against a running server: wrk when installed, else a bounded Python generator (same plan, same shape).

A plan is a method, the paths to rotate through, headers, and a body; `{u}` in a header or the body becomes
a value unique to the request (idempotency keys, items), so writes never replay or refuse each other.
"""

from __future__ import annotations

import http.client
import itertools
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.figures import LoadResult, letters, parse_wrk


@dataclass(frozen=True)
class Plan:
    method: str
    paths: tuple[str, ...]
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""

    def request(self, unique: str, n: int) -> tuple[str, str, dict[str, str], bytes]:
        path = self.paths[n % len(self.paths)]
        headers = {k: v.replace("{u}", unique) for k, v in self.headers.items()}
        body = self.body.replace("{u}", unique).encode()
        if body:
            headers.setdefault("Content-Type", "application/json")
        return self.method, path, headers, body


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def _lua_string(text: str) -> str:
    level = "=" * 4
    if f"]{level}]" in text:
        raise ValueError("text closes a Lua long string")
    return f"[{level}[{text}]{level}]"


def wrk_script(plan: Plan, prefix: str) -> str:
    """A wrk Lua script: rotate the paths, make `{u}` unique per thread and request."""
    paths = ", ".join(_lua_string(p) for p in plan.paths)
    headers = ", ".join(f"[ {_lua_string(k)} ] = {_lua_string(v)}" for k, v in plan.headers.items())
    content_type = '["Content-Type"] = "application/json",' if plan.body else ""
    return f"""
local paths = {{{paths}}}
local header_templates = {{{content_type} {headers}}}
local body_template = {_lua_string(plan.body)}
local counter = 0
local threads = 0
-- The counter in letters between two q's (bench.agents.letters): as an item, the desk's identity would drop a
-- number of four digits (an order reference), and item-x-1000 and item-x-1001 would be one item, refused.
local function letters(n)
  local s = ""
  repeat
    s = string.char(97 + n % 26) .. s
    n = math.floor(n / 26)
  until n == 0
  return "q" .. s .. "q"
end
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
function request()
  counter = counter + 1
  local u = {_lua_string(prefix)} .. "-" .. tostring(tid) .. "-" .. letters(counter)
  local path = paths[((counter + tid * 7) % #paths) + 1]
  local headers = {{}}
  for k, v in pairs(header_templates) do
    headers[k] = string.gsub(v, "{{u}}", u)
  end
  local body = nil
  if body_template ~= "" then
    body = string.gsub(body_template, "{{u}}", u)
  end
  return wrk.format({_lua_string(plan.method)}, path, headers, body)
end
"""


def run_wrk(*, port: int, plan: Plan, seconds: float, connections: int, prefix: str) -> LoadResult:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(wrk_script(plan, prefix))
    try:
        completed = subprocess.run(
            [
                "wrk",
                "-t2",
                f"-c{connections}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "10s",
                "--latency",
                "-s",
                script.name,
                f"http://127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        Path(script.name).unlink(missing_ok=True)
    if completed.stderr.strip():  # a Lua error: wrk would go on with the default request
        raise RuntimeError(f"wrk: {completed.stderr.strip()}")
    return parse_wrk(completed.stdout)


def run_python(*, port: int, plan: Plan, seconds: float, connections: int, prefix: str) -> LoadResult:
    """The fallback: one thread per connection, keep-alive http.client, for a fixed duration."""
    counter = itertools.count()
    lock = threading.Lock()
    latencies: list[float] = []
    errors = [0]
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine: list[float] = []
        bad = 0
        while time.perf_counter() < deadline:
            n = next(counter)
            method, path, headers, body = plan.request(f"{prefix}-py-{letters(n)}", n)
            started = time.perf_counter()
            try:
                conn.request(method, path, body=body or None, headers=headers)
                response = conn.getresponse()
                response.read()
                if not 200 <= response.status < 300:
                    bad += 1
            except (OSError, http.client.HTTPException):
                bad += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                continue
            mine.append(time.perf_counter() - started)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else None
    return LoadResult(requests=len(latencies) + errors[0], seconds=elapsed, p50_ms=p50, errors=errors[0])


def run_load(*, port: int, plan: Plan, seconds: float, connections: int, prefix: str) -> LoadResult:
    runner = run_wrk if have_wrk() else run_python
    return runner(port=port, plan=plan, seconds=seconds, connections=connections, prefix=prefix)


class Client:
    """One keep-alive connection for sequential timings (the growth figures): seconds per request."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def timed(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[float, int]:
        started = time.perf_counter()
        try:
            self.conn.request(method, path, body=body or None, headers=headers)
            response = self.conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            raise
        return time.perf_counter() - started, response.status

    def close(self) -> None:
        self.conn.close()
