"""A scripted Messages-API upstream that drives Claude Code through a long Bash session and checks
every request it gets: the stand-in for the provider in tests/e2e/test_claude_code.py.

    with ClaudeUpstream(rounds=60, context_window=60_000) as upstream:
        ... run Claude Code with ANTHROPIC_BASE_URL at compactd, COMPACTD_UPSTREAM_URL=upstream.base_url
        assert upstream.failures == []

Each main request (one that offers the Bash tool) is answered from what it carries, not from a
script: the newest Bash result's round number says which round comes next, so compaction on the
way (compactd's clipped, offloaded and summarized history) never confuses it. Round r asks for a
Bash command printing `output_lines(r)` numbered lines (every third round a large one, ~6k tokens;
the others ~3k); after the last round it answers with text. Every `read_every` rounds, when the
prompt shows an offloaded output (`[compactd: offloaded ... read_file ref=f_...]`), it first calls
compactd's `read_file` on that output's last lines and checks, in the next request, that the
result holds them (`reads`). Replies stream as the real API streams them (message_start, ping,
content_block_start / delta / stop, message_delta, message_stop) in chunked encoding.

It plays a model with preserved thinking (tests/fakes/preserved_thinking.py): every main reply
starts with a thinking block whose signature binds it to the request it answers (system, tools and
every earlier message, cache_control aside), and every request's thinking blocks are checked as the
real API checks them: a block on a changed prefix gets the documented 400 ("... is bound to a
different conversation ..."; `refused` counts them), or, with `prefix_mismatch_behavior:
"drop_block"`, is dropped and listed in `input_transformations`. `newest_thinking` records, per
main request after the first, whether it carried the previous reply's thinking on its own prefix.

Every request is checked and what is wrong is kept in `failures`: a valid Messages request
(worker.compaction.validate, Claude Code's `role: "system"` messages aside), at most 4
cache_control breakpoints, the whole request (system, messages, tools, max_tokens) inside
`context_window`, and no compaction request of Claude Code's own (its prompt asks for "plain text
only" with an <analysis> and a <summary> block). A request over the window is also answered as the
real API answers it, 400 "prompt is too long" (the error that makes Claude Code compact on its own).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from tests.fakes.preserved_thinking import THINKING, Binder, drop_mode, dropped, refusal
from worker.compaction.tokens import count_request, count_text
from worker.compaction.validate import request_problems

# what Claude Code's own compaction request says (docs/claude-code.md)
CLIENT_COMPACTION = ("Respond with plain text only", "CRITICAL: Respond with TEXT ONLY")
OFFLOADED = re.compile(
    r"\[compactd: offloaded; only the start is shown\..*?read_file ref=(f_[0-9a-f]{16})", re.S
)
FIRST_LINE = re.compile(r"^round (\d{3}) line 0001:", re.M)
READ_ID = re.compile(r"^toolu_read(\d{4})$")
LINE = "round {r:03d} line %04g: checked module parser_{r:03d} against the fixture set, status ok, 12 assertions passed"


def output_lines(r: int) -> int:
    """Lines the Bash command of round r prints: ~5.3k tokens, every third round ~6.9k."""
    return 260 if r % 3 == 0 else 200


def bash_command(r: int) -> str:
    return f"seq -f '{LINE.format(r=r)}' 1 {output_lines(r)}"


def expected_line(r: int, n: int) -> str:
    return LINE.format(r=r) % n


def offloaded_outputs(messages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(round, ref) of each Bash output the prompt shows offloaded (a preview and a read_file ref)."""
    found = []
    for m in messages:
        content = m.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") != "tool_result":
                continue
            text = result_text(block)
            if (ref := OFFLOADED.search(text)) and (first := FIRST_LINE.search(text)):
                found.append((int(first.group(1)), ref.group(1)))
    return found


@dataclass
class Read:
    """One read_file call the stand-in made, and whether its result held the lines asked for."""

    ref: str
    round: int
    start_line: int
    end_line: int
    ok: bool | None = None  # None until the result came back


@dataclass
class Seen:
    """One request as the stand-in saw it."""

    kind: str  # "main" (offers Bash), "side" (anything else)
    messages: int
    tokens: int  # system + messages + tools + max_tokens
    tools: list[str]
    stream: bool
    round: int  # the newest Bash round answered in it
    max_tokens: int
    markers: dict[str, int] = field(default_factory=dict)


@dataclass
class Turn:
    """What to answer: content blocks and a stop reason."""

    content: list[dict[str, Any]]
    stop_reason: str


def cache_breakpoints(body: dict[str, Any]) -> int:
    """cache_control markers anywhere in system, tools and messages (the API allows 4)."""
    found = 0

    def walk(value: Any) -> None:
        nonlocal found
        if isinstance(value, dict):
            found += "cache_control" in value
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for key in ("system", "tools", "messages"):
        walk(body.get(key))
    return found


def request_tokens(body: dict[str, Any]) -> int:
    """The whole request as compactd budgets it: system and messages, tool definitions, max_tokens."""
    tools = body.get("tools") or []
    max_tokens = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else 0
    messages = [
        {**m, "content": [{"type": "text", "text": c}] if isinstance(c := m.get("content"), str) else c}
        for m in body.get("messages") or []
    ]
    return (
        count_request({**body, "messages": messages})
        + (count_text(orjson.dumps(tools).decode()) if tools else 0)
        + max_tokens
    )


def text_of(value: Any) -> str:
    """Every string inside a message list, joined (for markers and signatures)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(text_of(v) for k, v in value.items() if k not in ("id", "tool_use_id", "type"))
    if isinstance(value, list):
        return "\n".join(text_of(v) for v in value)
    return ""


def request_failures(body: dict[str, Any], context_window: int) -> list[str]:
    """What is wrong with one request (empty: a valid request, within the window)."""
    # Claude Code's per-turn `role: "system"` messages are its own (a beta); the rest must be valid
    messages = [m for m in body.get("messages", []) if m.get("role") != "system"]
    failures = request_problems({"system": body.get("system", ""), "messages": messages})
    if (n := cache_breakpoints(body)) > 4:
        failures.append(f"{n} cache_control breakpoints (at most 4)")
    if (tokens := request_tokens(body)) > context_window:
        failures.append(f"{tokens} tokens with max_tokens and tools, over the {context_window}-token window")
    if any(s in text_of(body.get("messages")) for s in CLIENT_COMPACTION):
        failures.append("a compaction request of the client's own reached the upstream")
    return failures


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def newest_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool_result blocks of the last user message."""
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content")
            return [b for b in content if b.get("type") == "tool_result"] if isinstance(content, list) else []
    return []


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else text_of(content)


def bash_round(messages: list[dict[str, Any]]) -> int:
    """The newest Bash round answered anywhere in the history (0 before the first)."""
    rounds = [int(m.group(1)) for m in re.finditer(r'"toolu_bash(\d{4})"', json.dumps(messages))]
    return max(rounds, default=0)


class ClaudeUpstream:
    """The stand-in: a loopback HTTP server (start/stop or a with block) and what it saw."""

    def __init__(self, *, rounds: int = 60, context_window: int = 200_000, read_every: int = 10) -> None:
        self.rounds, self.context_window, self.read_every = rounds, context_window, read_every
        self.failures: list[str] = []
        self.requests: list[Seen] = []
        self.reads: list[Read] = []
        self.paths: list[str] = []
        self.next_read = read_every  # the first Bash round after which a read is due
        self.binder = Binder(b"claude-upstream")
        self.refused: list[str] = []  # requests answered 400 for a thinking block on a changed prefix
        self.newest_thinking: list[
            bool
        ] = []  # per main request after the first: the last reply's thinking carried
        self.last_signature: str | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ClaudeUpstream:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                upstream.answer(self, raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> ClaudeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- answering ------------------------------------------------------------------------------

    def answer(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        with self._lock:
            self.paths.append(handler.path)
            try:
                body = json.loads(raw)
            except ValueError:
                self.failures.append(f"request {len(self.requests)}: body is not JSON")
                return send_json(handler, 400, error_body("the request body is not valid JSON"))
            if "thread" in body:  # a proxy that keeps the conversation never hands its thread on
                self.failures.append(f"request {len(self.requests)}: a `thread` reached the upstream")
            checked = self.binder.check(body)
            transformations: list[dict[str, Any]] = []
            if not checked.valid:
                try:
                    mode = drop_mode(body, dict(handler.headers))
                except ValueError as exc:
                    return send_json(handler, 400, error_body(str(exc)))
                if mode != "drop_block":
                    self.refused.append(f"request {len(self.requests)}: {checked.problem}")
                    return send_json(handler, 400, refusal(checked, dict(handler.headers)))
                body, transformations = dropped(body, checked)
            if "count_tokens" in handler.path:
                return send_json(handler, 200, {"input_tokens": request_tokens({**body, "max_tokens": 0})})
            try:
                turn, seen = self.plan(body)
            except Exception as exc:  # a stand-in bug must fail the test, not hang the client
                self.failures.append(f"request {len(self.requests)}: the stand-in broke: {exc!r}")
                return send_json(handler, 500, error_body(f"stand-in error {exc!r}"))
            self.requests.append(seen)
        if seen.tokens > self.context_window:
            # as the real API answers (and what makes Claude Code start a compaction of its own)
            too_long = f"prompt is too long: {seen.tokens} tokens > {self.context_window} maximum"
            return send_json(handler, 400, error_body(too_long))
        message = {
            "id": f"msg_{len(self.requests):06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude"),
            "content": turn.content,
            "stop_reason": turn.stop_reason,
            "stop_sequence": None,
            # what the API counts as input: the prompt and tools, not the max_tokens kept free
            "usage": {"input_tokens": seen.tokens - seen.max_tokens, "output_tokens": 40},
        }
        if transformations:
            message["input_transformations"] = transformations
        if body.get("stream"):
            send_stream(handler, message)
        else:
            send_json(handler, 200, message)

    def plan(self, body: dict[str, Any]) -> tuple[Turn, Seen]:
        """Check the request and decide the reply (called under the lock)."""
        n = len(self.requests)
        messages = body.get("messages") or []
        tools = [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
        history = text_of(messages)
        markers = {
            name: history.count(mark)
            for name, mark in (
                ("clipped", "[compactd: clipped"),
                ("offloaded", "[compactd: offloaded"),
                ("handoff", "[compactd handoff note]"),
                # Claude Code starting over from a summary of its own
                ("client_restart", "This session is being continued from a previous conversation"),
            )
        }
        r = bash_round(messages)
        seen = Seen(
            "main" if "Bash" in tools else "side",
            len(messages),
            request_tokens(body),
            tools,
            bool(body.get("stream")),
            r,
            body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else 0,
            markers,
        )
        self.failures.extend(f"request {n}: {f}" for f in request_failures(body, self.context_window))
        if seen.kind == "side":
            return Turn([{"type": "text", "text": "Bash session"}], "end_turn"), seen
        if "read_file" not in tools:
            self.failures.append(f"request {n}: compactd's read_file is not among the tools {tools}")
        self.check_reads(newest_results(messages))
        if self.last_signature is not None:
            carried = {b.get("signature") for m in messages for b in _blocks(m) if b.get("type") in THINKING}
            self.newest_thinking.append(self.last_signature in carried)
        turn = self.next_turn(r, messages)
        # a model with preserved thinking: every main reply starts with a block bound to this request
        block = self.binder.block(body, f"Round {r}: reading the newest result before the next step.")
        self.last_signature = block["signature"]
        return Turn([block, *turn.content], turn.stop_reason), seen

    def check_reads(self, results: list[dict[str, Any]]) -> None:
        for block in results:
            if not (m := READ_ID.match(str(block.get("tool_use_id")))):
                continue
            read = self.reads[int(m.group(1))]
            text = result_text(block)
            # the lines asked for, give or take a line or two the client may add around the output
            want = [expected_line(read.round, k) for k in range(read.start_line + 2, read.end_line - 1)]
            read.ok = all(w in text for w in want) and not block.get("is_error")
            if not read.ok:
                self.failures.append(
                    f"read_file {read.ref} lines {read.start_line}-{read.end_line}: got {text[:300]!r}"
                )

    def next_turn(self, r: int, messages: list[dict[str, Any]]) -> Turn:
        if r >= self.rounds:
            return Turn([{"type": "text", "text": f"All {self.rounds} rounds ran."}], "end_turn")
        shown = offloaded_outputs(messages) if r >= self.next_read else []
        if shown:
            origin, ref = shown[-1]
            last = output_lines(origin)
            read = Read(ref, origin, last - 9, last)
            self.reads.append(read)
            self.next_read = r + self.read_every
            call = {
                "type": "tool_use",
                "id": f"toolu_read{len(self.reads) - 1:04d}",
                "name": "read_file",
                "input": {"ref": ref, "start_line": read.start_line, "end_line": read.end_line},
            }
            return Turn([{"type": "text", "text": "Reading an offloaded output back."}, call], "tool_use")
        nxt = r + 1
        call = {
            "type": "tool_use",
            "id": f"toolu_bash{nxt:04d}",
            "name": "Bash",
            "input": {"command": bash_command(nxt), "description": f"Round {nxt} checks"},
        }
        return Turn([{"type": "text", "text": f"Round {nxt}."}, call], "tool_use")


def error_body(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def stream_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The message as the API streams it: text in a few deltas, tool input as JSON pieces."""
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    # the blocks the API dropped are listed at message_start (preserved thinking, drop_block)
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for i, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            opened = {"type": "thinking", "thinking": "", "signature": ""}
            yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
            delta = {"type": "signature_delta", "signature": block["signature"]}
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        elif block["type"] == "text":
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
            )
            text = block["text"]
            for k in range(0, len(text), 12):
                delta = {"type": "text_delta", "text": text[k : k + 12]}
                yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        else:
            opened = {**block, "input": {}}
            yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}
            encoded = json.dumps(block["input"])
            for k in range(0, len(encoded), 40):
                delta = {"type": "input_json_delta", "partial_json": encoded[k : k + 40]}
                yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    end = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": end,
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def send_stream(handler: BaseHTTPRequestHandler, message: dict[str, Any]) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("transfer-encoding", "chunked")
    handler.end_headers()
    try:
        for name, data in stream_events(message):
            chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True
