"""The desk (D) and the plain views (P) in one WSGI app: gunicorn bench.wsgi."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
application = get_wsgi_application()
