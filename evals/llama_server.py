"""llama-cpp-python's OpenAI-compatible server, speaking the `json_schema` response format the official client
sends: `python -m evals.llama_server --model <gguf> --host 127.0.0.1 --port 8089 [llama_cpp.server options]`.

llama-cpp-python 0.3.36 accepts `response_format` only as `{"type": "json_object", "schema": ...}` (it compiles
the schema to a grammar, so the reply is constrained to it); OpenAI's structured-output form
`{"type": "json_schema", "json_schema": {"schema": ...}}` is refused with a validation error. This module runs
the same server with one ASGI step in front of it that rewrites the second form into the first, so the desk's
`openai` backend talks to it exactly as it talks to OpenAI. A request without `max_tokens` gets
SUNDRY_MODEL_MAX_TOKENS (default 1024): a small model held to a grammar can otherwise write until its window
is full.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

ASGIApp = Any
DEFAULT_MAX_TOKENS = int(os.environ.get("SUNDRY_MODEL_MAX_TOKENS", "1024"))


def rewrite_request(body: dict[str, Any], *, max_tokens: int = DEFAULT_MAX_TOKENS) -> dict[str, Any]:
    """The chat-completions body with OpenAI's json_schema format as llama-cpp-python's json_object+schema."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        body = {**body, "response_format": {"type": "json_object", **({"schema": schema} if schema else {})}}
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body = {**body, "max_tokens": max_tokens}
    return body


class JsonSchemaFormat:
    """ASGI middleware: rewrites POST /v1/chat/completions bodies (see `rewrite_request`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or not scope["path"].endswith("/chat/completions")
        ):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict):
            raw = json.dumps(rewrite_request(body)).encode()
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(raw)).encode()))
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)


def main() -> None:
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_args_from_model(parser, Settings)
    args = parser.parse_args()
    # parse_model_from_args returns an instance (its annotation says the class).
    server_settings: Any = parse_model_from_args(ServerSettings, args)
    model_settings: list[Any] = [parse_model_from_args(ModelSettings, args)]
    app = create_app(server_settings=server_settings, model_settings=model_settings)
    uvicorn.run(JsonSchemaFormat(app), host=server_settings.host, port=server_settings.port)


if __name__ == "__main__":
    main()
