"""The fingerprint of a request body, for idempotency keys: the same key must come with the same body."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def request_fingerprint(body: dict[str, Any]) -> str:
    """SHA-256 of the body as canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
