"""A local HTTP server that speaks enough of the Anthropic Messages API for the real SDK, scripted per request.

    with FakeMessagesAPI() as api:
        api.script(error(429, retry_after=1), reply("the note"))
        client = anthropic.Anthropic(api_key="test", base_url=api.base_url, max_retries=0)
        ...
        api.requests[0].body["max_tokens"]

Each POST /v1/messages takes the next scripted `Reply` (the default reply once the script runs
out) and is recorded, headers and JSON body, before it is answered. A request with `"stream": true`
gets the reply as server-sent events, as the real API streams them (message_start, ping, each
block's start / deltas / stop, message_delta, message_stop; tool input as input_json_delta pieces,
thinking as thinking_delta then signature_delta), in chunked transfer encoding; `delay_seconds`
spaces the events, and a client that goes away is counted in `disconnects`. POST
/v1/messages/count_tokens answers an estimate (bytes / 4) and takes no scripted reply.

It plays a model with preserved thinking (tests/fakes/preserved_thinking.py): the thinking blocks of
a scripted reply are signed, at the time they are sent, against the request they answer, and every
request's thinking blocks are checked as the real API checks them (a block on a changed prefix or
one it did not sign: the documented 400, counted in `refused`; with `prefix_mismatch_behavior:
"drop_block"` and its beta header, dropped and listed in the reply's `input_transformations`).
`preserved_thinking=False` plays a model without the check.

Standard library only (and the stand-ins' rule module), so it also runs on its own, to try the
drop-in endpoint with no provider: `python -m tests.fakes.messages_api` listens on
http://127.0.0.1:8790 (`--port` for another), prints its URL and, until Ctrl-C, plays the model for
the demo agent (`python -m ops.demo_agent`: `demo_reply` calls its `read_log` tool round after
round, then answers) and answers every other call with a short note.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from tests.fakes.preserved_thinking import Binder, drop_mode, dropped, refusal

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

    kind: Literal["message", "error", "hang", "drop", "malformed", "stream_error"]
    text: str = ""
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str = "end_turn"
    hang_seconds: float = 0.0
    content: tuple[Mapping[str, Any], ...] = ()  # content blocks instead of one text block
    delay_seconds: float = 0.0  # between two streamed events


def reply(
    text: str, *, input_tokens: int = 100, output_tokens: int = 20, stop_reason: str = "end_turn"
) -> Reply:
    """A successful message whose only content block is `text`."""
    return Reply(
        "message", text, input_tokens=input_tokens, output_tokens=output_tokens, stop_reason=stop_reason
    )


def tool_call(
    name: str, tool_input: Mapping[str, Any], *, tool_id: str, text: str = "", thinking: str = ""
) -> Reply:
    """A response asking for one tool call (stop_reason tool_use), after optional thinking and text."""
    blocks: list[Mapping[str, Any]] = [thinking_block(thinking)] if thinking else []
    blocks += [{"type": "text", "text": text}] if text else []
    blocks.append({"type": "tool_use", "id": tool_id, "name": name, "input": dict(tool_input)})
    return Reply("message", stop_reason="tool_use", input_tokens=100, output_tokens=20, content=tuple(blocks))


def blocks(*content: Mapping[str, Any], stop_reason: str = "end_turn", delay_seconds: float = 0.0) -> Reply:
    """A successful message with these content blocks."""
    return Reply(
        "message",
        stop_reason=stop_reason,
        input_tokens=100,
        output_tokens=20,
        content=tuple(content),
        delay_seconds=delay_seconds,
    )


def thinking_block(text: str) -> dict[str, Any]:
    """A thinking block with a signature (opaque, as the API's are)."""
    return {"type": "thinking", "thinking": text, "signature": f"sig{abs(hash(text)) % 10**12:012d}" * 4}


def slow(text: str, *, delay_seconds: float) -> Reply:
    """A streamed text answer whose events come `delay_seconds` apart (a 16-character delta each)."""
    return Reply("message", text, input_tokens=100, output_tokens=20, delay_seconds=delay_seconds)


def stream_error() -> Reply:
    """A stream that starts (message_start) and then reports overloaded_error as an `error` event."""
    return Reply("stream_error")


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

    def __init__(
        self,
        default: Reply | None = None,
        *,
        keep_requests: bool = True,
        first_byte_seconds: float = 0.0,
        preserved_thinking: bool = True,
        port: int = 0,
        respond: Callable[[Any], Reply | None] | None = None,
    ) -> None:
        self.default = default or reply("default note")
        # once the script is spent: the reply `respond(body)` makes of the request, else the default
        self.respond = respond
        self.keep_requests = keep_requests  # off for benchmarks: bodies of 100s of KB add up
        # a model's time to its first token: each message waits this long before its answer starts
        self.first_byte_seconds = first_byte_seconds
        self.requests: list[RecordedRequest] = []
        self.disconnects = 0  # streamed replies the client went away from before their end
        self.completed = 0  # streamed replies sent to their end
        self.binder = Binder(b"fake-messages-api") if preserved_thinking else None
        self.refused: list[str] = []  # requests answered 400 for their thinking blocks
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
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

    def reset(self) -> FakeMessagesAPI:
        """Forget the script and what was recorded (a fake shared by several tests)."""
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.disconnects = self.completed = 0
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

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            if self.keep_requests:
                self.requests.append(request)

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            if self.keep_requests:
                self.requests.append(request)
            if self._script:
                return self._script.popleft()
        made = self.respond(request.body) if self.respond is not None else None
        return made or self.default

    def checked(self, body: Any, headers: Mapping[str, str]) -> tuple[Any, list[Any], dict[str, Any] | None]:
        """The body as the model reads it (invalid thinking dropped with drop_block), the
        `input_transformations` saying so, and the 400 body when the request is refused."""
        if self.binder is None or not isinstance(body, dict):
            return body, [], None
        result = self.binder.check(body)
        if result.valid:
            return body, [], None
        try:
            mode = drop_mode(body, headers)
        except ValueError as exc:
            return (
                body,
                [],
                {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}},
            )
        if mode == "drop_block":
            kept, entries = dropped(body, result)
            return kept, entries, None
        with self._lock:
            self.refused.append(str(result.problem))
        return body, [], refusal(result, headers)

    def _message(self, body: Any, r: Reply, transformations: list[Any] | None = None) -> dict[str, Any]:
        model = body.get("model", "unknown") if isinstance(body, dict) else "unknown"
        content: list[dict[str, Any]] = []
        for b in [dict(b) for b in r.content] or [{"type": "text", "text": r.text}]:
            if b.get("type") == "thinking" and self.binder is not None and isinstance(body, dict):
                # signed now, against the request it answers (after the reply's blocks before it)
                b = {**b, "signature": self.binder.sign(body, content)}
            content.append(b)
        message = {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": r.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens},
        }
        if transformations:
            message["input_transformations"] = transformations
        return message


def _handler_for(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as real API servers set it: else each small event waits for the client's
        # delayed ACK of the one before (a 40 ms stall before the first event, Nagle's algorithm)
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            recorded = RecordedRequest("POST", self.path, headers, body, raw)
            # the prefix check runs on count_tokens too, with the same 400
            body, transformations, refused = api.checked(body, headers)
            if refused is not None:
                api._record(recorded)
                self._send_json(400, refused)
                return
            if self.path.split("?")[0] == "/v1/messages/count_tokens":
                api._record(recorded)
                self._send_json(200, {"input_tokens": _estimate_tokens(body)})
                return
            r = api._next(recorded)
            if api.first_byte_seconds and api._stopping.wait(api.first_byte_seconds):
                return
            streamed = isinstance(body, dict) and body.get("stream") is True
            if self.path.split("?")[0] != "/v1/messages":
                self._send_json(
                    404, {"type": "error", "error": {"type": "not_found_error", "message": "no route"}}
                )
            elif r.kind == "message" and streamed:
                self._send_events(sse_events(api._message(body, r, transformations)), r.delay_seconds)
            elif r.kind == "stream_error":
                start = sse_events(api._message(body, r))[:1]
                error = (
                    "error",
                    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                )
                self._send_events([*start, error], 0.0)
            elif r.kind == "message":
                self._send_json(200, api._message(body, r, transformations))
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

        def _send_events(self, events: list[tuple[str, Any]], delay_seconds: float) -> None:
            """Server-sent events in chunked encoding, one chunk per event; a write that fails
            (the client went away) ends the reply and is counted."""
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.send_header("request-id", f"req_fake{len(api.requests):06d}")
            self.end_headers()
            try:
                for i, (name, data) in enumerate(events):
                    if i and delay_seconds and api._stopping.wait(delay_seconds):
                        break
                    chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with api._lock:
                    api.disconnects += 1
                self.close_connection = True
                return
            with api._lock:
                api.completed += 1

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


def _estimate_tokens(body: Any) -> int:
    if not isinstance(body, dict):
        return 0
    return max(1, len(json.dumps([body.get("system"), body.get("messages"), body.get("tools")])) // 4)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse_events(message: dict[str, Any]) -> list[tuple[str, Any]]:
    """The events the real API streams for `message` (a non-streaming response body)."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {"input_tokens": usage["input_tokens"], "output_tokens": 1}
    events: list[tuple[str, Any]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for i, block in enumerate(message["content"]):
        kind = block.get("type")
        if kind == "text":
            first, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": p} for p in _pieces(block["text"], 16)],
            )
        elif kind == "tool_use":
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in ["", *_pieces(json.dumps(block["input"]), 7)]
            ]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], 16)]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            first, deltas = dict(block), []
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": i, "content_block": first})
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


DEMO_PORT = 8790
DEMO_TOOL = "read_log"
_DEMO_ROUND = re.compile(r"^toolu_demo(\d{4})$")
_DEMO_TOTAL = re.compile(r"logs of the (\d+) builds")
_FAILED = re.compile(r"\b(build-\d+): FAILED\b")
_REF = re.compile(r"\b([fh]_[0-9a-f]{16})\b")


def demo_reply(body: Any) -> Reply | None:
    """The model's part in the demo (ops/demo_agent.py), from what the request carries: while the
    task's builds are not all read, a `read_log` call for the next one (the newest result's id says
    which: compaction may have folded the earlier calls into a summary); then compactd's `grep` on
    every file the prompt names, for what compaction moved out of it; then an answer naming the
    failed builds found. None: not the demo's request."""
    if not isinstance(body, dict) or DEMO_TOOL not in {t.get("name") for t in body.get("tools") or ()}:
        return None
    messages = body.get("messages") or [{}]
    text = json.dumps(messages)
    total = int(m.group(1)) if (m := _DEMO_TOTAL.search(text)) else 10
    size = _estimate_tokens(body)
    last = _blocks(messages[-1])
    if not any(str(b.get("tool_use_id", "")).startswith("toolu_grep") for b in last):
        done = max(
            (int(m.group(1)) for b in last if (m := _DEMO_ROUND.match(str(b.get("tool_use_id", ""))))),
            default=0,
        )
        if done < total:
            ask = {
                "type": "tool_use",
                "id": f"toolu_demo{done + 1:04d}",
                "name": DEMO_TOOL,
                "input": {"build": done + 1},
            }
            say = {"type": "text", "text": f"Reading the log of build {done + 1} of {total}."}
            return _calls(size, say, ask)
    # what compactd clipped, offloaded or summarized is in its files, named in the prompt (and in
    # its archives): searched with compactd's own grep (answered inside the call), the files found
    # there searched next, three rounds at most (ids toolu_grep<round><call>)
    uses = [b for m in messages for b in _blocks(m) if b.get("type") == "tool_use"]
    grepped = {str(b.get("input", {}).get("ref")) for b in uses if b.get("name") == "grep"}
    rounds = len({str(b.get("id"))[10] for b in uses if str(b.get("id", "")).startswith("toolu_grep")})
    new = sorted(set(_REF.findall(text)) - grepped)
    if new and rounds < 3:
        pattern = r"FAILED|[fh]_[0-9a-f]{16}"
        return _calls(
            size,
            *(
                {
                    "type": "tool_use",
                    "id": f"toolu_grep{rounds}{i:03d}",
                    "name": "grep",
                    "input": {"ref": ref, "pattern": pattern, "max_matches": 200},
                }
                for i, ref in enumerate(new[:40])
            ),
        )
    failed = sorted(set(_FAILED.findall(text)), key=lambda b: int(b.split("-")[1]))
    answer = f"I read all {total} build logs. Failed: {', '.join(failed) or 'none'}."
    return Reply("message", answer, input_tokens=size, output_tokens=30)


def _calls(input_tokens: int, *content: Mapping[str, Any]) -> Reply:
    return Reply(
        "message", stop_reason="tool_use", input_tokens=input_tokens, output_tokens=30, content=content
    )


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def main(argv: list[str] | None = None) -> None:
    """Serve until Ctrl-C, whatever stdin is (a terminal, or /dev/null when started with &)."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.fakes.messages_api", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=DEMO_PORT, help="0: any free port (default %(default)s)")
    args = parser.parse_args(argv)
    with FakeMessagesAPI(keep_requests=False, port=args.port, respond=demo_reply) as api:
        print(f"a local stand-in for the Messages API at {api.base_url} (Ctrl-C stops it)", flush=True)
        print(f"  compactd:   COMPACTD_UPSTREAM_URL={api.base_url} make up", flush=True)
        print("  the demo:   COMPACTD_KEY=cpd_... .venv/bin/python -m ops.demo_agent", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
