"""The request headers the API reads (Idempotency-Key, If-Match and If-None-Match) and its query parameters."""

from __future__ import annotations

import re

from django.utils.http import parse_etags, quote_etag

from desk.api.exceptions import BadHeader, BadQueryParameter, PreconditionRequired

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
# The state's entity tag is its version, quoted ("3"); Django parses the header's list of tags.
VERSION_TAG = re.compile(r'"(\d{1,9})"')


def etag(version: int) -> str:
    return quote_etag(str(version))


def idempotency_key(raw: str | None) -> str:
    """The key: 1 to 255 visible ASCII characters, bare or as a quoted structured-field string."""
    if raw is None or raw.strip() == "":
        raise BadHeader("the Idempotency-Key header is required: a unique key per action, reused on retries")
    value = raw.strip()
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    if not IDEMPOTENCY_KEY.match(value) or '"' in value:
        raise BadHeader(
            "the Idempotency-Key header is malformed: use 1 to 255 visible ASCII characters, "
            'without spaces or quotes (a quoted "key" is also accepted)'
        )
    return value


def optional_idempotency_key(raw: str | None) -> str:
    """The key where it is optional (turns): absent is "", present must be well formed."""
    if raw is None:
        return ""
    return idempotency_key(raw)


def if_match_version(raw: str | None) -> int:
    """The state version named by If-Match (a strong ETag such as "3")."""
    if raw is None or raw.strip() == "":
        raise PreconditionRequired()
    tags = parse_etags(raw)
    match = VERSION_TAG.fullmatch(tags[0]) if len(tags) == 1 else None
    if match is None:
        raise BadHeader(
            'the If-Match header must be the ETag of the state you read, such as "3" '
            "(one strong entity tag; * is not accepted)"
        )
    return int(match.group(1))


def if_none_match_matches(raw: str | None, version: int) -> bool:
    """Whether If-None-Match names the current version (weak comparison, as RFC 9110 says)."""
    if not raw:
        return False
    tags = parse_etags(raw)
    return "*" in tags or etag(version) in {tag.removeprefix("W/") for tag in tags}


def positive_int_param(raw: str | None, name: str, *, default: int, maximum: int = 10**6) -> int:
    """A query parameter that must be a positive whole number, or its default when absent."""
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise BadQueryParameter(f"{name} must be a whole number from 1 to {maximum}, not {raw[:40]!r}")
    return int(raw)
