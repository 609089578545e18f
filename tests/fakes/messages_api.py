"""A local HTTP server that speaks enough of the Anthropic Messages API for the real SDK, scripted per request.

    with FakeMessagesAPI() as api:
        api.script(error(429, retry_after=1), reply("the note"))
        client = anthropic.Anthropic(api_key="test", base_url=api.base_url, max_retries=0)
        ...
        api.requests[0].body["max_tokens"]

Each POST /v1/messages takes the next scripted `Reply` (the default reply once the script runs
out) and is recorded, headers and JSON body, before it is answered. Other test files can use the
`messages_api` fixture below by importing it or through `pytest_plugins`.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer: a message, an error status, a hang, a dropped connection or broken JSON."""

    kind: Literal["message", "error", "hang", "drop", "malformed"]
    text: str = ""
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str = "end_turn"
    hang_seconds: float = 0.0
    content: tuple[Mapping[str, Any], ...] = ()  # content blocks instead of one text block


def reply(
    text: str, *, input_tokens: int = 100, output_tokens: int = 20, stop_reason: str = "end_turn"
) -> Reply:
    """A successful message whose only content block is `text`."""
    return Reply(
        "message", text, input_tokens=input_tokens, output_tokens=output_tokens, stop_reason=stop_reason
    )


def tool_call(name: str, tool_input: Mapping[str, Any], *, tool_id: str, text: str = "") -> Reply:
    """A response asking for one tool call (stop_reason tool_use), after an optional text block."""
    blocks: list[Mapping[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.append({"type": "tool_use", "id": tool_id, "name": name, "input": dict(tool_input)})
    return Reply("message", stop_reason="tool_use", input_tokens=100, output_tokens=20, content=tuple(blocks))


def error(
    status: int, *, retry_after: float | None = None, headers: Mapping[str, str] | None = None
) -> Reply:
    """An API error in Anthropic's shape ({"type": "error", "error": {...}}), with retry-after if given."""
    extra = dict(headers or {})
    if retry_after is not None:
        extra["retry-after"] = f"{retry_after:g}"
    return Reply("error", status=status, headers=extra)


def hang(seconds: float = 5.0) -> Reply:
    """Answer nothing for `seconds` (longer than the client's timeout), then close the connection."""
    return Reply("hang", hang_seconds=seconds)


def drop() -> Reply:
    """Read the request, then close the connection without a response."""
    return Reply("drop")


def malformed() -> Reply:
    """A 200 application/json response whose body is not JSON."""
    return Reply("malformed")


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the server received it; header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body (None when it was not JSON)
    raw: bytes


class FakeMessagesAPI:
    """The Messages API on 127.0.0.1 (ephemeral port), in a thread; a context manager."""

    def __init__(self, default: Reply | None = None) -> None:
        self.default = default or reply("default note")
        self.requests: list[RecordedRequest] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            # a short poll interval: shutdown() waits up to one interval, once per test
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-messages-api",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies of every request so far, oldest first."""
        return [r.body for r in self.requests]

    def script(self, *replies: Reply) -> FakeMessagesAPI:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._script.extend(replies)
        return self

    def start(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases any hanging handler
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeMessagesAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            return self._script.popleft() if self._script else self.default

    def _message(self, body: Any, r: Reply) -> dict[str, Any]:
        model = body.get("model", "unknown") if isinstance(body, dict) else "unknown"
        return {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [dict(b) for b in r.content] or [{"type": "text", "text": r.text}],
            "stop_reason": r.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens},
        }


def _handler_for(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            r = api._next(RecordedRequest("POST", self.path, headers, body, raw))
            if self.path.split("?")[0] != "/v1/messages":
                self._send_json(
                    404, {"type": "error", "error": {"type": "not_found_error", "message": "no route"}}
                )
            elif r.kind == "message":
                self._send_json(200, api._message(body, r))
            elif r.kind == "error":
                kind = ERROR_TYPES.get(r.status, "api_error")
                self._send_json(
                    r.status, {"type": "error", "error": {"type": kind, "message": kind}}, r.headers
                )
            elif r.kind == "malformed":
                self._send_bytes(200, b'{"id": "msg_broken", "type": "mess', "application/json")
            else:
                if r.kind == "hang":
                    api._stopping.wait(r.hang_seconds)
                self.close_connection = True

        def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
            self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

        def _send_bytes(
            self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_fake{len(api.requests):06d}")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            # quiet: test output should show assertions, not access logs
            pass

    return Handler


@pytest.fixture
def messages_api() -> Iterator[FakeMessagesAPI]:
    """A running fake Messages API, stopped after the test."""
    with FakeMessagesAPI() as api:
        yield api
