"""A stand-in for vLLM's ``/v1/chat/completions/render`` endpoint, for tests.

It follows vLLM's render contract for text-only requests, written from vLLM's
``chat_utils`` (not from speculators' local renderer, which the tests compare
against it): an assistant's reasoning is taken from ``reasoning`` only and given to
the template as ``reasoning`` and ``reasoning_content``; text parts are joined with
newlines; tool-call arguments are parsed from JSON; the template renders text,
which is then tokenized without special tokens and truncated as requested.
"""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _parse_message(message: dict) -> dict:
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(part["text"] for part in content)
    parsed: dict[str, Any] = {"role": message["role"], "content": content or ""}
    if message["role"] == "assistant":
        if message.get("tool_calls") is not None:
            calls = []
            for call in message["tool_calls"]:
                arguments = call["function"]["arguments"]
                if isinstance(arguments, str):
                    arguments = json.loads(arguments)
                calls.append(
                    call | {"function": call["function"] | {"arguments": arguments}}
                )
            parsed["tool_calls"] = calls
        if message.get("reasoning") is not None:
            parsed["reasoning"] = parsed["reasoning_content"] = message["reasoning"]
    if message["role"] == "tool" and "tool_call_id" in message:
        parsed["tool_call_id"] = message["tool_call_id"]
    return parsed


def render_request(tokenizer: Any, body: dict) -> list[int]:
    """The token ids vLLM's render endpoint returns for ``body``."""
    text = tokenizer.apply_chat_template(
        [_parse_message(m) for m in body["messages"]],
        tools=body.get("tools"),
        add_generation_prompt=body.get("add_generation_prompt", True),
        tokenize=False,
        **body.get("chat_template_kwargs", {}),
    )
    ids = tokenizer.encode(text, add_special_tokens=False)
    limit = body.get("truncate_prompt_tokens")
    if limit is not None and len(ids) > limit:
        keep_first = body.get("truncation_side") == "right"
        ids = ids[:limit] if keep_first else ids[len(ids) - limit :]
    return ids


@contextmanager
def serve_render(tokenizer: Any) -> Iterator[tuple[str, list[dict]]]:
    """Serve the endpoint on localhost; yields its base URL and the requests."""
    requests: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            if self.path != "/v1/chat/completions/render":
                self.send_error(HTTPStatus.NOT_FOUND)
                return
            payload = json.dumps({"token_ids": render_request(tokenizer, body)})
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
