"""gunicorn for Sundry Desk, behind nginx (deploy/nginx.conf): `gunicorn -c deploy/gunicorn.conf.py`.

Sync workers, because every request the desk serves is short database work (the compaction's summarizer call has
one wall-clock deadline, SUNDRY_COMPACTION_DEADLINE_SECONDS, 10 s by default) and nginx in front reads each request
whole before a worker sees it and takes each answer at once: a sync worker is never held by a slow client, so a
thread or event-loop worker would buy nothing but the risks of sharing a process. Command-line flags override what
is here (`--bind`, `--workers`), as gunicorn documents.
"""

from __future__ import annotations

wsgi_app = "sundry.wsgi:application"

# Loopback only: nothing but nginx reaches the workers (nginx.conf's upstream names this address).
bind = ["127.0.0.1:8001"]
worker_class = "sync"
# About two per core: a worker waits on PostgreSQL part of each request.
workers = 4

# The app is loaded once, in the master, and workers are forked from it: a worker that dies (killed, or recycled by
# max_requests) is replaced in milliseconds instead of a few seconds of imports, and the workers share the loaded
# code and the tokenizer's tables. Django opens database connections lazily, in each worker. The price: HUP starts
# new workers from the code the master loaded, so a deploy of new code restarts the master (systemctl restart).
preload_app = True

# Above the compaction deadline (10 s), so no worker is killed mid-compaction; nginx's proxy_read_timeout (35 s)
# sits above this, so a worker killed here is answered 502 by nginx rather than left hanging.
timeout = 30
graceful_timeout = 30
# A worker is replaced after about 1,000 requests, not all at once (the jitter), bounding any slow growth.
max_requests = 1000
max_requests_jitter = 100

# nginx refuses a request line or header field over 4 KiB and headers over 16 KiB with JSON; these are wider so
# gunicorn's own HTML 400/414/431 never answer a request nginx let through (8190 is gunicorn's maximum).
limit_request_line = 8190
limit_request_field_size = 8190
limit_request_fields = 4096  # 16 KiB of headers hold at most ~3,300 (a 5-byte `a:b` line each)

# nginx is the only client: trust its X-Forwarded-* headers and nobody else's.
forwarded_allow_ips = "127.0.0.1,::1"

# gunicorn 27's control socket (for gunicornc) sits at one path per user, shared by every gunicorn that user runs;
# the deploy does not use it.
control_socket_disable = True

accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms id=%({x-request-id}i)s'
errorlog = "-"
loglevel = "info"


def when_ready(server: object) -> None:
    """Warm the master before it forks the workers (preload_app): the tokenizer's tables and the summarizer's
    client library, which each worker would otherwise load on its first requests (seconds on a busy machine,
    while the ticket's rows are locked). No database connection is opened here: each worker opens its own."""
    import openai  # noqa: F401

    from core.tokens import get_encoding

    get_encoding()
