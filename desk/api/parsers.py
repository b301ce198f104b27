from __future__ import annotations

import json
import math
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # new in DRF 3.18

from desk.api.exceptions import PayloadTooLarge

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class _OutOfRange:
    """A number the desk cannot store, kept as written until the walk below can name its field."""

    def __init__(self, text: str, why: str) -> None:
        self.text, self.why = text, why


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float | _OutOfRange:
    value = float(text)
    if not math.isfinite(value):
        return _OutOfRange(text, "is out of range for a number")
    return value


def _parse_int(text: str) -> int | _OutOfRange:
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        return _OutOfRange(text, "is out of range for a 64-bit integer")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _find_out_of_range(data: Any) -> tuple[str, _OutOfRange] | None:
    """The first number that cannot be stored, with its path (`args.a[1]`); iterative, as nesting is deep."""
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, _OutOfRange):
            return path, value
        if isinstance(value, dict):
            pending.extend((f"{path}.{k}" if path else k, v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            pending.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return None


def loads_strict(text: str) -> Any:
    """JSON as the desk accepts it: no NaN/Infinity, no number that overflows (1e400, ints past 64 bits),
    no key twice in one object. Refusals name the field (ValidationError) or the fault (ParseError)."""
    try:
        data = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
            object_pairs_hook=_object,
        )
    except _DuplicateKey as exc:
        raise ValidationError(
            {exc.key: [f"the key {exc.key!r} appears more than once in one object"]}
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"the body is not valid JSON: {exc}") from None
    found = _find_out_of_range(data)
    if found:
        path, number = found
        raise ValidationError({path or "body": [f"{number.text[:40]} {number.why}"]})
    return data


class BoundedJSONParser(JSONParser):
    """JSON with the body-size limit enforced (DRF reads the stream past Django's check) and no 500s.

    Deeply nested documents raise RecursionError in the json module, which DRF does not catch. Numbers
    that cannot be stored and duplicate keys are refused here, so every endpoint refuses them alike.
    """

    def parse(
        self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Any = None
    ) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        parser_context = parser_context or {}
        request = parser_context.get("request")
        if request is not None and limit is not None:
            try:
                declared = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                declared = 0
            if declared > limit:
                raise PayloadTooLarge(
                    f"the request body is {declared} bytes; the desk accepts at most {limit}"
                )
        try:
            raw = stream.read(limit + 1 if limit is not None else -1) if stream is not None else b""
        except (
            OSError
        ) as exc:  # the client sent less than its Content-Length and hung up (UnreadablePostError, ...)
            raise ParseError(
                f"the body could not be read in full (shorter than its Content-Length?): {exc}"
            ) from None
        declared_length = request.META.get("CONTENT_LENGTH") if request is not None else None
        if (
            declared_length
            and str(declared_length).isdigit()
            and len(raw) < int(declared_length) <= (limit or 0)
        ):
            raise ParseError(
                f"the body is {len(raw)} bytes, shorter than its Content-Length of {declared_length}"
            )
        if limit is not None and len(raw) > limit:
            raise PayloadTooLarge(f"the request body is over {limit} bytes, the most the desk accepts")
        encoding = get_encoding(parser_context)
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"the body is not valid JSON: {exc}") from None
        return loads_strict(text)
