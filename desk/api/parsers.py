from __future__ import annotations

import json
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # new in DRF 3.18

from desk.api.exceptions import PayloadTooLarge


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(JSONParser):
    """JSON with the body-size limit enforced (DRF reads the stream past Django's check) and no 500s.

    Deeply nested documents raise RecursionError in the json module, which DRF does not catch.
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
        raw = stream.read(limit + 1 if limit is not None else -1) if stream is not None else b""
        if limit is not None and len(raw) > limit:
            raise PayloadTooLarge(f"the request body is over {limit} bytes, the most the desk accepts")
        encoding = get_encoding(parser_context)
        try:
            return json.loads(raw.decode(encoding), parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"the body is not valid JSON: {exc}") from None
