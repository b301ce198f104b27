"""An offline OpenAI-compatible model for the examples (Chat Completions on 127.0.0.1; no key, no network).

    python examples/loopback_model.py --port 8260 &
    export OPENAI_BASE_URL=http://127.0.0.1:8260/v1 OPENAI_API_KEY=sk-loopback SUNDRY_AGENT_API=chat_completions

It is a script, not a model: a customer who mentions a refund gets `issue_refund` for the garden table
($40), one who asks where a parcel is gets `track_parcel`; a tool result is answered in a sentence (a
refused refund as "already issued"); anything else is acknowledged.
"""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REFUND = {"order": "SU-87310", "item": "garden-table", "amount_cents": 4000, "reason": "scratched leg"}
PARCEL = {"order": "SU-87311", "item": "patio-parasol"}


def reply(body: dict[str, Any], number: int) -> dict[str, Any]:
    messages = body.get("messages") or []
    tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
    last = messages[-1] if messages else {}
    raw = last.get("content")
    content: str = raw if isinstance(raw, str) else json.dumps(raw)
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if last.get("role") == "tool":
        if "refused" in content and "true" in content:
            message["content"] = "That refund was already issued earlier, so there is nothing more to refund."
        elif "issue_refund" in json.dumps(messages[-2:]) or "refund" in content:
            message["content"] = "Done: a $40 refund for the garden table is on its way."
        else:
            message["content"] = "Your parcel is in transit; it should arrive soon."
    else:
        text = content.lower()
        call: tuple[str, dict[str, Any]] | None = None
        if "refund" in text and "issue_refund" in tools:
            call = ("issue_refund", REFUND)
        elif ("where" in text or "parcel" in text) and "track_parcel" in tools:
            call = ("track_parcel", PARCEL)
        if call:
            message["tool_calls"] = [
                {
                    "id": f"call_{number}",
                    "type": "function",
                    "function": {"name": call[0], "arguments": json.dumps(call[1])},
                }
            ]
        else:
            message["content"] = "Thanks, I have noted that on your ticket."
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "loopback"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


class Handler(BaseHTTPRequestHandler):
    count = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(200, {"object": "list", "data": [{"id": "loopback", "object": "model"}]})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        Handler.count += 1
        self._send(200, reply(body, Handler.count))

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8260)
    options = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    print(f"loopback model on http://127.0.0.1:{options.port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
