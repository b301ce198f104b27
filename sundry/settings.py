"""One settings module, read from the environment.

The embedded defaults (SQLite under ./var, the offline extractive summarizer, the immediate task
backend) need no variables at all. With SUNDRY_ENV=production the desk refuses to start without a
SECRET_KEY or with DEBUG on.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

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
    if DEBUG:
        raise ImproperlyConfigured("SUNDRY_ENV=production refuses to start with DEBUG on")
elif not SECRET_KEY:
    SECRET_KEY = "sundry-development-only-key-not-for-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_tasks_db",
    "tickets",
    "compaction",
    "desk",
    "evals",
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
    "django_htmx.middleware.HtmxMiddleware",
]

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
            ],
        },
    },
]

# Connections: kept open between requests and checked before reuse (CONN_MAX_AGE + CONN_HEALTH_CHECKS),
# the default chosen by `make bench` against a connection per request and Django's PostgreSQL pool (README,
# "Benchmarks"). DATABASE_POOL=1 uses the pool instead (psycopg_pool: pip install 'psycopg-pool==3.3.3').
DATABASE_POOL = env_bool("DATABASE_POOL", False)
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'sundry.sqlite3'}"),
        conn_max_age=0 if DATABASE_POOL else env_int("DATABASE_CONN_MAX_AGE", 600),
        conn_health_checks=env_bool("DATABASE_CONN_HEALTH_CHECKS", True),
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
        "rest_framework.authentication.TokenAuthentication",
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
}

# Compaction: per-class settings live on TicketClass; three summarizer attempts are fixed by the spec.
# The OpenAI-compatible summarizer: the official client reads OPENAI_BASE_URL and OPENAI_API_KEY.
SUNDRY_SUMMARIZER_TIMEOUT_SECONDS = env_float("SUNDRY_SUMMARIZER_TIMEOUT_SECONDS", 30.0)
# One deadline per compaction, shared by its attempts: an agent's turn answer never waits longer.
# The documented gunicorn timeout (README) sits above it.
SUNDRY_COMPACTION_DEADLINE_SECONDS = env_float("SUNDRY_COMPACTION_DEADLINE_SECONDS", 10.0)
if SUNDRY_COMPACTION_DEADLINE_SECONDS <= 0:
    raise ImproperlyConfigured("SUNDRY_COMPACTION_DEADLINE_SECONDS must be a positive number of seconds")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # django.tasks logs every state change of every task at INFO; only problems are worth a line.
    "loggers": {"django.tasks": {"level": "WARNING"}},
}

if PRODUCTION:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
