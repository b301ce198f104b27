"""One settings module, read from the environment.

The embedded defaults (SQLite under ./var, the offline extractive summarizer, the immediate task
backend) need no variables at all. With SUNDRY_ENV=production the desk refuses to start without a
SECRET_KEY or with DEBUG on.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no or on/off")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


SUNDRY_ENV = env_str("SUNDRY_ENV", "development")
if SUNDRY_ENV not in {"development", "production"}:
    raise ImproperlyConfigured(f"SUNDRY_ENV={SUNDRY_ENV!r}: expected 'development' or 'production'")
PRODUCTION = SUNDRY_ENV == "production"

DEBUG = env_bool("DEBUG", default=not PRODUCTION)
SECRET_KEY = env_str("SECRET_KEY")
if PRODUCTION:
    if not SECRET_KEY:
        raise ImproperlyConfigured("SUNDRY_ENV=production needs SECRET_KEY")
    # Django's own deploy check wants 50 characters and 5 distinct ones (so `abcde` x 10 passes it); the desk
    # wants 12 distinct, and never the key `startproject` generated (its `django-insecure-` prefix).
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 12 or SECRET_KEY.startswith("django-insecure-"):
        raise ImproperlyConfigured(
            "SUNDRY_ENV=production needs a SECRET_KEY of at least 50 characters (12 or more distinct, not "
            "Django's generated django-insecure- key), e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    if DEBUG:
        raise ImproperlyConfigured("SUNDRY_ENV=production refuses to start with DEBUG on")
elif not SECRET_KEY:
    SECRET_KEY = "sundry-development-only-key-not-for-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "testserver"])
if PRODUCTION and "*" in ALLOWED_HOSTS:
    raise ImproperlyConfigured("SUNDRY_ENV=production refuses ALLOWED_HOSTS='*': name the desk's host names")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_tasks_db",
    "axes",
    "tickets",
    "compaction",
    "ledger",
    "desk",
    "evals",
    "notify",
    # Tooling apps: their management commands (evals: compaction_eval ...; bench: bench).
    "bench",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "desk.middleware.TraceContextMiddleware",
    "desk.middleware.ApiErrorsMiddleware",
    "desk.middleware.PageNotFoundMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into our 429 page.
    "axes.middleware.AxesMiddleware",
]

# Login throttling (django-axes): failures are counted per account *and* client address together, so guesses
# at one account from one address never lock another account out (nor the account from elsewhere); at the
# limit that account from that address is refused with templates/registration/locked_out.html (429)
# (desk.middleware.locked_out)
# until the cool-off has passed since the last failure.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("SUNDRY_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("SUNDRY_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_CALLABLE = "desk.middleware.locked_out"
AXES_HTTP_RESPONSE_CODE = 429
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "desk.middleware.client_address"
AXES_VERBOSE = False
if AXES_FAILURE_LIMIT < 1 or timedelta(0) >= AXES_COOLOFF_TIME:
    raise ImproperlyConfigured("SUNDRY_LOGIN_FAILURE_LIMIT and SUNDRY_LOGIN_COOLOFF_MINUTES must be positive")

# Content-Security-Policy on every response: scripts and styles only from our own origin (a script
# element may carry {{ csp_nonce }}; none needs to). Style *attributes* are allowed: the queue draws its
# token bars with a computed width. The API docs (Swagger UI) get their own policy in desk/api/urls.py.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "style-src-attr": [CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

ROOT_URLCONF = "sundry.urls"
WSGI_APPLICATION = "sundry.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
        },
    },
]

# Connections: kept open between requests (CONN_MAX_AGE), the default chosen by `make bench` against a
# connection per request and Django's PostgreSQL pool (README, "Benchmarks"). No health check by default: it is
# a `SELECT 1` round trip before every request's first query, and a connection that failed is closed by Django
# at the end of the request that saw the error anyway (the next request opens a new one); turn it on with
# DATABASE_CONN_HEALTH_CHECKS=1 where idle connections are cut by something between (README, "Configuration").
# DATABASE_POOL=1 uses the pool instead (psycopg_pool: pip install 'psycopg-pool==3.3.3').
DATABASE_POOL = env_bool("DATABASE_POOL", False)
# The agent's hot statements (its reads, an action's and a settle's writes) on PostgreSQL bind their parameters on
# the server, so psycopg prepares them on each connection and the database plans them once (tickets.prepared).
# Off (DATABASE_PREPARED_STATEMENTS=0) behind a pooler in transaction mode that does not keep prepared statements
# (PgBouncer before 1.21, or without max_prepared_statements).
DATABASE_PREPARED_STATEMENTS = env_bool("DATABASE_PREPARED_STATEMENTS", True)
# Per worker: the characters of the actions' served texts kept for the states it served last (the state and
# context reads then join a state's actions again only when its version changed; tickets.served_state).
SUNDRY_ACTION_TEXT_CACHE_CHARS = env_int("SUNDRY_ACTION_TEXT_CACHE_CHARS", 8_000_000)
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'sundry.sqlite3'}"),
        conn_max_age=0 if DATABASE_POOL else env_int("DATABASE_CONN_MAX_AGE", 600),
        conn_health_checks=env_bool("DATABASE_CONN_HEALTH_CHECKS", False),
    )
}
if DATABASE_POOL:
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_POOL=1 needs a PostgreSQL DATABASE_URL")
    # Per process: a sync gunicorn worker serves one request at a time, so one connection is enough.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("DATABASE_POOL_MIN_SIZE", 1),
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", 4),
    }
if DATABASE_PREPARED_STATEMENTS and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django turns psycopg's prepared statements off; its own cursors bind on the client and never prepare, so
    # this reaches only the statements that bind on the server (tickets.prepared).
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    VAR_DIR.mkdir(exist_ok=True)
    # Wait for a writer instead of failing at once, and take the write lock when a transaction starts:
    # a deferred transaction that reads and then writes fails with "database is locked" under concurrency.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"timeout": 20, "transaction_mode": "IMMEDIATE"})
    DATABASES["default"]["TEST"] = {"NAME": ":memory:"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# Production serves `collectstatic` output through WhiteNoise; elsewhere it serves straight from the apps.
WHITENOISE_USE_FINDERS = not PRODUCTION

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Failed API token authentications: after this many for one token prefix (a token with it exists) or, for keys
# no token has, one client address, 429 until the cool-off ends (counted in the database: every worker agrees).
# A valid token is never refused.
SUNDRY_API_AUTH_FAILURE_LIMIT = env_int("SUNDRY_API_AUTH_FAILURE_LIMIT", 20)
SUNDRY_API_AUTH_COOLOFF_SECONDS = env_int("SUNDRY_API_AUTH_COOLOFF_SECONDS", 300)
# How many proxies in front of the desk append to X-Forwarded-For (0: use the connection's address).
SUNDRY_TRUSTED_PROXIES = env_int("SUNDRY_TRUSTED_PROXIES", 0)
# A live token, its user and roles are kept this many seconds per process, keyed by the key's digest: a request
# within it reads no token row. A revoked token (or a deactivated user) is refused within this many seconds by
# every worker; 0 reads the row on every request.
SUNDRY_AUTH_CACHE_SECONDS = env_float("SUNDRY_AUTH_CACHE_SECONDS", 5.0)
if SUNDRY_AUTH_CACHE_SECONDS < 0:
    raise ImproperlyConfigured("SUNDRY_AUTH_CACHE_SECONDS must be 0 or a positive number of seconds")

# The importer's limits: a larger file, or a document nested deeper, is refused with a clear error.
SUNDRY_IMPORT_MAX_BYTES = env_int("SUNDRY_IMPORT_MAX_BYTES", 64 * 1024 * 1024)
SUNDRY_IMPORT_MAX_DEPTH = env_int("SUNDRY_IMPORT_MAX_DEPTH", 32)

# Where `load_demo` (development only) keeps the demo agent's token, so `make run` prints the same one each time.
SUNDRY_DEMO_TOKEN_FILE = env_str("SUNDRY_DEMO_TOKEN_FILE", str(VAR_DIR / "demo-agent-token"))

# The demo's summarizer for T-40118 (`load_demo`): `scripted` replays the seed's lossy summary (the default);
# `openai` has the OpenAI-compatible server in OPENAI_BASE_URL (e.g. `make model-server`) write it, with the
# model SUNDRY_DEMO_SUMMARIZER_MODEL, on a 4,000-token class so the summarizer's prompt fits SmolLM2's window.
SUNDRY_DEMO_SUMMARIZER = env_str("SUNDRY_DEMO_SUMMARIZER", "scripted")
if SUNDRY_DEMO_SUMMARIZER not in {"scripted", "openai"}:
    raise ImproperlyConfigured("SUNDRY_DEMO_SUMMARIZER must be scripted or openai")
SUNDRY_DEMO_SUMMARIZER_MODEL = env_str("SUNDRY_DEMO_SUMMARIZER_MODEL", "smollm2-135m-instruct")

# Largest request body the desk accepts (the API answers 413 above it).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("SUNDRY_MAX_BODY_BYTES", 256 * 1024)

# Background work: compaction runs as a django.tasks task. The immediate backend runs it inline in
# the turn; production sets TASKS_BACKEND=django_tasks_db.DatabaseBackend and runs `manage.py db_worker`.
TASKS = {
    "default": {
        "BACKEND": env_str("TASKS_BACKEND", "django.tasks.backends.immediate.ImmediateBackend"),
    }
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "desk.api.authentication.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Sundry Desk API",
    "DESCRIPTION": "Pinned ticket state, turns, actions and compactions for LLM support agents.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two `source` fields: how the desk knows a state item (every provenance), and what an agent may say of
    # its own writes (no supervisor correction or ledger entry). Named, so the schema's enums are stable.
    "ENUM_NAME_OVERRIDES": {
        "ProvenanceEnum": "core.state.PROVENANCES",
        "AgentProvenanceEnum": ["tool_result", "customer_turn", "agent_inference"],
    },
}

# Compaction: per-class settings live on TicketClass; three summarizer attempts are fixed by the spec.
# The OpenAI-compatible summarizer: the official client reads OPENAI_BASE_URL and OPENAI_API_KEY.
SUNDRY_SUMMARIZER_TIMEOUT_SECONDS = env_float("SUNDRY_SUMMARIZER_TIMEOUT_SECONDS", 30.0)
# One deadline per compaction, shared by its attempts: an agent's turn answer never waits longer.
# The documented gunicorn timeout (README) sits above it.
SUNDRY_COMPACTION_DEADLINE_SECONDS = env_float("SUNDRY_COMPACTION_DEADLINE_SECONDS", 10.0)
if SUNDRY_COMPACTION_DEADLINE_SECONDS <= 0:
    raise ImproperlyConfigured("SUNDRY_COMPACTION_DEADLINE_SECONDS must be a positive number of seconds")
# A running compaction is a lease: its run holds it for the deadline plus this grace (reading and applying);
# past it, the next boundary retakes it (inline, or queued again for a worker). A process killed mid-compaction
# (SIGKILL, an OOM kill) so never leaves a ticket waiting on work nobody is doing.
SUNDRY_COMPACTION_LEASE_GRACE_SECONDS = env_float("SUNDRY_COMPACTION_LEASE_GRACE_SECONDS", 15.0)
if SUNDRY_COMPACTION_LEASE_GRACE_SECONDS <= 0:
    raise ImproperlyConfigured("SUNDRY_COMPACTION_LEASE_GRACE_SECONDS must be a positive number of seconds")

# The payments ledger (ledger/): the webhook's signing secret (unset: the webhook answers 503), how far apart
# an entry and an action may be in time and still match, and how long an action waits for its entry before it
# is flagged unconfirmed.
SUNDRY_LEDGER_SECRET = env_str("SUNDRY_LEDGER_SECRET")
SUNDRY_LEDGER_MATCH_WINDOW_MINUTES = env_int("SUNDRY_LEDGER_MATCH_WINDOW_MINUTES", 48 * 60)
SUNDRY_LEDGER_GRACE_MINUTES = env_int("SUNDRY_LEDGER_GRACE_MINUTES", 60)

# Notifications (notify/): each webhook attempt waits at most this long (no redirects followed); a failed
# attempt is retried after 1s, 2s, 4s ... (base, doubling, capped) up to the attempts; links in messages
# start with the site URL. Email goes through Django's mail backend (EMAIL_* settings, DEFAULT_FROM_EMAIL).
SUNDRY_NOTIFY_TIMEOUT_SECONDS = env_float("SUNDRY_NOTIFY_TIMEOUT_SECONDS", 5.0)
SUNDRY_NOTIFY_MAX_ATTEMPTS = env_int("SUNDRY_NOTIFY_MAX_ATTEMPTS", 5)
SUNDRY_NOTIFY_BACKOFF_SECONDS = env_float("SUNDRY_NOTIFY_BACKOFF_SECONDS", 1.0)
SUNDRY_NOTIFY_BACKOFF_CAP_SECONDS = env_float("SUNDRY_NOTIFY_BACKOFF_CAP_SECONDS", 300.0)
if SUNDRY_NOTIFY_TIMEOUT_SECONDS <= 0 or SUNDRY_NOTIFY_MAX_ATTEMPTS < 1 or SUNDRY_NOTIFY_BACKOFF_SECONDS <= 0:
    raise ImproperlyConfigured(
        "SUNDRY_NOTIFY_TIMEOUT_SECONDS and SUNDRY_NOTIFY_BACKOFF_SECONDS must be positive, "
        "SUNDRY_NOTIFY_MAX_ATTEMPTS at least 1"
    )
SUNDRY_NOTIFY_SITE_URL = env_str("SUNDRY_NOTIFY_SITE_URL", "http://127.0.0.1:8000")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "sundry-desk@localhost")
if env_str("EMAIL_HOST") or PRODUCTION:
    # Production sends through SMTP (EMAIL_HOST, localhost by default, as Django's own default did).
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": env_str("EMAIL_HOST", "localhost"),
                "port": env_int("EMAIL_PORT", 25),
                "username": env_str("EMAIL_HOST_USER"),
                "password": env_str("EMAIL_HOST_PASSWORD"),
                "use_tls": env_bool("EMAIL_USE_TLS", False),
                "timeout": SUNDRY_NOTIFY_TIMEOUT_SECONDS,
            },
        }
    }
else:
    # No mail server configured: mail is printed to the console (development; tests use locmem).
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # django.tasks logs every state change of every task at INFO; only problems are worth a line.
    "loggers": {"django.tasks": {"level": "WARNING"}},
}


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto` (value https) or `X-Forwarded-Proto=https`: the header a TLS-terminating proxy sets."""
    raw = env_str(name).strip()
    if not raw:
        return None
    header, _, value = raw.partition("=")
    header = header.strip()
    if not header or any(c.isspace() for c in header):
        raise ImproperlyConfigured(
            f"{name}={raw!r}: expected a header name such as X-Forwarded-Proto[=https]"
        )
    return "HTTP_" + header.upper().replace("-", "_"), value.strip() or "https"


# HTTPS. Production redirects http to https and sends HSTS by default; behind a TLS-terminating proxy set
# SECURE_PROXY_SSL_HEADER (the proxy must overwrite that header) or, if the proxy redirects itself,
# SECURE_SSL_REDIRECT=0.
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
if PRODUCTION:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    if SECURE_HSTS_SECONDS < 0:
        raise ImproperlyConfigured("SECURE_HSTS_SECONDS must be 0 (off) or a positive number of seconds")
    if not SECURE_HSTS_PRELOAD:
        # Asking browsers' preload lists to hard-code the domain is a deliberate, hard-to-undo choice
        # (SECURE_HSTS_PRELOAD=1), so its absence is not a deployment warning here.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
