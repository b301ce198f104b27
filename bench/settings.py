"""The desk's own settings, with the bench-only URLconf that adds the plain Django views (P) beside the desk."""

from sundry.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
