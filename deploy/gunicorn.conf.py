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

accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms id=%({x-request-id}i)s'
errorlog = "-"
loglevel = "info"
