"""The webhook's signature, as the payment providers sign theirs (Stripe's scheme).

The header is `Sundry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, keyed by
SUNDRY_LEDGER_SECRET. Several `v1` values may be sent (a secret being rolled): one matching is enough. The
timestamp is signed with the body, so a captured request replayed later than the tolerance is refused, and
within it the entry ids make a replay a no-op. Pure: no settings, no database.
"""

from __future__ import annotations

import hashlib
import hmac

TOLERANCE_SECONDS = 300
SCHEME = "v1"


class SignatureError(ValueError):
    """Why a signature is refused, in words for the sender."""


def sign(*, secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of "<t>.<body>"."""
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signature_header(*, secret: str, timestamp: int, body: bytes) -> str:
    """The header a sender sets: what clients and the tests send."""
    return f"t={timestamp},{SCHEME}={sign(secret=secret, timestamp=timestamp, body=body)}"


def parse_header(header: str) -> tuple[int, list[str]]:
    """The timestamp and the v1 signatures of a header; SignatureError when it is not one."""
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            if not value.isascii() or not value.isdigit() or len(value) > 12:
                raise SignatureError("the t= value of Sundry-Signature is not a unix time in seconds")
            timestamp = int(value)
        elif key == SCHEME:
            signatures.append(value)
    if timestamp is None:
        raise SignatureError("Sundry-Signature has no t= timestamp")
    if not signatures:
        raise SignatureError("Sundry-Signature has no v1= signature")
    return timestamp, signatures


def verify(*, secret: str, header: str, body: bytes, now: float, tolerance: int = TOLERANCE_SECONDS) -> int:
    """The signed timestamp when the header signs the body with the secret within the tolerance of `now`;
    SignatureError otherwise. Every v1 value is compared in constant time."""
    timestamp, signatures = parse_header(header)
    if abs(now - timestamp) > tolerance:
        raise SignatureError(
            f"the signature's timestamp is {int(now - timestamp)} seconds from the desk's clock "
            f"(at most {tolerance} allowed): sign the request when you send it"
        )
    expected = sign(secret=secret, timestamp=timestamp, body=body)
    # Every candidate is compared, so the time taken does not say which one (or whether any) was close.
    good = False
    for candidate in signatures:
        good |= hmac.compare_digest(expected, candidate.strip().lower())
    if not good:
        raise SignatureError("no v1 signature in Sundry-Signature matches the body and the secret")
    return timestamp
