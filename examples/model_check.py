"""Shared by the examples: make sure the model answers before anything is opened at the desk."""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlsplit

OFFLINE_HINT = "python examples/loopback_model.py serves one offline"


def model_base_url_or_exit(program: str) -> str:
    """The OpenAI-compatible base URL the example will use, once its port accepts a connection; otherwise
    exit with one line (nothing has been opened or stored yet)."""
    base = os.environ.get("OPENAI_BASE_URL", "")
    if not base and not os.environ.get("OPENAI_API_KEY"):
        sys.exit(
            f"{program}: no model: set OPENAI_BASE_URL to an OpenAI-compatible server ({OFFLINE_HINT}) "
            "or OPENAI_API_KEY"
        )
    url = base or "https://api.openai.com/v1"
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=3):
            pass
    except OSError as exc:
        sys.exit(
            f"{program}: the model server at {url} is not reachable ({exc.strerror or exc}); {OFFLINE_HINT}"
        )
    return url
