"""The payments ledger's webhook: `POST /api/v1/ledger/`, signed as the payment providers sign theirs.

Not behind agent token auth: the signature is the authentication (ledger/signature.py). One entry or
`{"entries": [...]}`; every entry is validated before one is written; idempotent on the entry id. Every
answer is JSON; nothing of a refused request is written.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from core.errors import DeskError
from ledger.entries import EntryIn
from ledger.importer import collect_entry, refuse_constant
from ledger.services import EntryError, LedgerEntryConflict, LedgerRejected, ingest_ledger_entries, refuse
from ledger.signature import SignatureError, verify

SIGNATURE_HEADER = "Sundry-Signature"
MAX_ENTRIES = 1000


def _error(status: int, code: str, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": code, "message": message, **extra}, status=status)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"the key {key!r} appears twice in one object")
        data[key] = value
    return data


def parse_body(body: bytes) -> list[tuple[str, EntryIn]]:
    """The entries of a webhook body, each with where it was; LedgerRejected naming every bad field."""
    try:
        data = json.loads(
            body.decode("utf-8"), parse_constant=refuse_constant, object_pairs_hook=_no_duplicate_keys
        )
    except UnicodeDecodeError:
        raise LedgerRejected("the body is not UTF-8") from None
    except ValueError as exc:  # json.JSONDecodeError is one
        raise LedgerRejected(f"the body is not valid JSON: {exc}") from None
    if isinstance(data, dict) and "entries" in data:
        if set(data) != {"entries"} or not isinstance(data["entries"], list):
            raise LedgerRejected('a batch is {"entries": [...]} and nothing else')
        raw_entries = [(f"entries[{i}]", e) for i, e in enumerate(data["entries"])]
        if not raw_entries:
            raise LedgerRejected("entries is empty")
        if len(raw_entries) > MAX_ENTRIES:
            raise LedgerRejected(f"at most {MAX_ENTRIES} entries in one request")
    elif isinstance(data, dict):
        raw_entries = [("entry", data)]
    else:
        raise LedgerRejected('the body is one entry (a JSON object) or {"entries": [...]}')
    entries: list[tuple[str, EntryIn]] = []
    errors: list[EntryError] = []
    for where, raw in raw_entries:
        collect_entry(where, raw, entries, errors)
    if errors:
        raise refuse(errors)
    return entries


@csrf_exempt
def ledger_webhook(request: HttpRequest) -> JsonResponse:
    if request.method != "POST":
        response = _error(405, "method_not_allowed", "the ledger webhook takes POST")
        response["Allow"] = "POST"
        return response
    secret = settings.SUNDRY_LEDGER_SECRET
    if not secret:
        return _error(
            503,
            "ledger_not_configured",
            "the ledger webhook is off: SUNDRY_LEDGER_SECRET is not set on the desk",
        )
    try:
        body = request.body
    except RequestDataTooBig:
        return _error(
            413,
            "payload_too_large",
            f"the request body is larger than the desk accepts (at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes)",
        )
    header = request.headers.get(SIGNATURE_HEADER)
    if not header:
        return _error(401, "signature_missing", f"the {SIGNATURE_HEADER} header is required")
    try:
        verify(secret=secret, header=header, body=body, now=time.time())
    except SignatureError as exc:
        return _error(401, "bad_signature", str(exc))
    try:
        result = ingest_ledger_entries(entries=parse_body(body))
    except LedgerEntryConflict as exc:
        return JsonResponse(exc.as_json(), status=409)
    except LedgerRejected as exc:
        return JsonResponse(exc.as_json(), status=400)
    except DeskError as exc:
        return JsonResponse(exc.as_json(), status=400)
    return JsonResponse(result.as_json(), status=200)
