"""A local stand-in for OpenAI's Responses and Chat Completions APIs that checks what the real ones
check, for the OpenAI drop-in's tests (real openai SDK, Codex, LiteLLM clients against compactd).

    with OpenAIStandIn(context_window=64_000) as api:
        api.script(reply("hello"), reply(calls=[("exec_command", {"cmd": "ls"})]))
        ... COMPACTD_OPENAI_UPSTREAM_URL=api.base_url ...
        assert api.failures == [] and api.dropped == 0

What it enforces, as the real APIs do (developers.openai.com, the Responses and Chat Completions
references; "Preserved reasoning"):

- a request of the documented shape: `input` items / `messages` of known roles and types;
- tool pairing: every `function_call` (`custom_tool_call`) has its output later in the input and
  every output follows its call (400 "No tool output found for function call ...", "No tool call
  found for function call output ..."); in Chat Completions an assistant's `tool_calls` are followed
  by a `tool` message for each id (400);
- the context window: a request whose input tokens (o200k_base, counted by quicktok) pass it is
  answered 400 `context_length_exceeded`, the error the SDKs and Codex recognise;
- preserved reasoning: each reply starts with a `reasoning` item whose `encrypted_content` (when
  the request's `include` asks for it, as the real API returns it) binds it to the request it
  answered (instructions, tools, and the input before it, reasoning items left out, ids and
  statuses aside) and to the reasoning item before it in that input; a reasoning item sent back on
  a changed prefix, or after a gap, is dropped (`dropped` counts them, as the real model silently
  reasons without it); a forged one is refused (400), and so is one without its encrypted content
  under `store: false` (the real API's "Item with id ... not found").

Every check's failures are kept in `failures` (and answered with the real API's error); replies
stream as the real APIs stream (Responses events with sequence numbers; chat chunks and `[DONE]`).
Independent of compactd's code: a green test says compactd keeps the rules.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import quicktok

_ENCODING = quicktok.get_encoding("o200k_base")
_SECRET = b"stand-in reasoning key"
REASONING_TOKENS = 80  # what one reasoning item costs in input tokens


def count(text: str) -> int:
    return int(_ENCODING.count(text))


@dataclass
class Reply:
    """What the model answers: text, tool calls ((name, arguments), in order), or an error."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    reasoning: str = "Working out the next step."
    error: tuple[int, dict[str, Any]] | None = None


def reply(text: str = "", calls: list[tuple[str, dict[str, Any] | str]] | None = None, **kw: Any) -> Reply:
    return Reply(text=text, calls=list(calls or []), **kw)


def error(status: int, message: str = "upstream error", code: str | None = None) -> Reply:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return Reply(error=(status, {"error": {"message": message, "type": kind, "param": None, "code": code}}))


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    tokens: int = 0
    reasoning_kept: int = 0  # reasoning items it carried on their own prefix
    reasoning_dropped: int = 0


# -- preserved reasoning --------------------------------------------------------------------


def _plain_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item as the model reads it: no id or status, string content as one part."""
    out = {k: v for k, v in item.items() if k not in ("id", "status")}
    if out.get("type", "message") == "message" and "role" in out:
        out["type"] = "message"
        content = out.get("content")
        if isinstance(content, str):
            kind = "output_text" if out["role"] == "assistant" else "input_text"
            out["content"] = [{"type": kind, "text": content}]
        elif isinstance(content, list):
            out["content"] = [
                {k: v for k, v in p.items() if k not in ("annotations", "logprobs")} for p in content
            ]
    return out


def prefix_digests(body: dict[str, Any], items: list[dict[str, Any]]) -> list[str]:
    """The digest of what an item at each position 0..len(items) is bound to: the instructions,
    the tools and every earlier item but reasoning items, as the model reads them (one pass)."""
    running = hashlib.sha256()
    running.update(
        json.dumps([body.get("instructions") or "", body.get("tools") or []], sort_keys=True).encode()
    )
    out = [running.copy().hexdigest()[:32]]
    for item in items:
        if item.get("type") != "reasoning":
            running.update(json.dumps(_plain_item(item), sort_keys=True, separators=(",", ":")).encode())
        out.append(running.copy().hexdigest()[:32])
    return out


def mint(prefix: str, previous: str) -> str:
    payload = json.dumps({"prefix": prefix, "previous": previous}).encode()
    mac = hmac.new(_SECRET, payload, hashlib.sha256).hexdigest()[:32]
    return base64.b64encode(payload).decode() + "." + mac


def opened(token: Any) -> dict[str, str] | None:
    if not isinstance(token, str) or "." not in token:
        return None
    data, mac = token.rsplit(".", 1)
    try:
        payload = base64.b64decode(data)
    except ValueError:
        return None
    if not hmac.compare_digest(hmac.new(_SECRET, payload, hashlib.sha256).hexdigest()[:32], mac):
        return None
    found = json.loads(payload)
    return found if isinstance(found, dict) else None


def check_reasoning(body: dict[str, Any], items: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """(kept, dropped, refusals) of the input's reasoning items: each must sit on the prefix it was
    minted on, after the reasoning item it followed; once one is dropped every later one is."""
    kept = dropped = 0
    refusals: list[str] = []
    previous = "none"
    broken = False
    digests: list[str] | None = None
    for i, item in enumerate(items):
        if item.get("type") != "reasoning":
            continue
        if item.get("encrypted_content") is None:
            if body.get("store") is False:  # nothing kept upstream for an id to name
                refusals.append(
                    f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is set to false."
                )
            continue  # with store, the upstream reads it by its id
        bound = opened(item.get("encrypted_content"))
        if bound is None:
            refusals.append(
                f"input[{i}]: the encrypted content of reasoning item {item.get('id')} could not be verified"
            )
            continue
        digests = digests or prefix_digests(body, items)
        if broken or bound["prefix"] != digests[i] or bound["previous"] != previous:
            broken = True
            dropped += 1
            continue
        kept += 1
        previous = str(item.get("id"))
    return kept, dropped, refusals


# -- request checks --------------------------------------------------------------------------


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return [i for i in given if isinstance(i, dict)] if isinstance(given, list) else []


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "\n".join(
            _text(v) for k, v in value.items() if k in ("text", "output", "arguments", "input", "content")
        )
    return ""


def responses_tokens(body: dict[str, Any]) -> int:
    items = input_items(body)
    total = count(body.get("instructions") or "") + count(json.dumps(body.get("tools") or []))
    for item in items:
        total += 4 + (REASONING_TOKENS if item.get("type") == "reasoning" else count(_text(item)))
    return total


def responses_failures(body: dict[str, Any]) -> list[str]:
    items = input_items(body)
    if not isinstance(body.get("input"), str | list):
        return ["input: a string or a list of items is required"]
    failures = []
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") not in ("user", "assistant", "system", "developer"):
            failures.append(f"input[{i}].role: invalid value {item.get('role')!r}")
        elif kind in ("function_call", "custom_tool_call"):
            calls[str(item.get("call_id"))] = i
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                failures.append(f"No tool call found for function call output with call_id {call_id}.")
            answered.add(call_id)
    failures += [f"No tool output found for function call {c}." for c in calls if c not in answered]
    return failures


def chat_tokens(body: dict[str, Any]) -> int:
    total = count(json.dumps(body.get("tools") or []))
    for m in body.get("messages") or []:
        total += 4 + count(_text(m.get("content"))) + count(json.dumps(m.get("tool_calls") or []))
    return total


def chat_failures(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages: a non-empty list is required"]
    failures = []
    waiting: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            failures.append(f"messages[{i}].role: invalid value {role!r}")
        if role == "tool":
            if m.get("tool_call_id") not in waiting:
                failures.append(
                    f"messages[{i}]: messages with role 'tool' must be a response to a preceding message with 'tool_calls'"
                )
            waiting.discard(m.get("tool_call_id"))
            continue
        if waiting:
            failures.append(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each"
                f" 'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(waiting)}"
            )
            waiting = set()
        if role == "assistant":
            waiting = {c.get("id") for c in m.get("tool_calls") or []}
    if waiting:
        failures.append(f"tool_call_ids without response messages: {sorted(waiting)}")
    return failures


# -- the server --------------------------------------------------------------------------------


Responder = Callable[[str, dict[str, Any], dict[str, str]], Reply]


class OpenAIStandIn:
    """The stand-in server; `script(...)` queues replies, else `responder` decides, else a note."""

    def __init__(
        self, context_window: int = 200_000, responder: Responder | None = None, port: int = 0
    ) -> None:
        self.context_window = context_window
        self.responder = responder
        self.requests: list[Recorded] = []
        self.failures: list[str] = []
        self.dropped = 0
        self.keep_requests = True  # False: nothing kept per request (a benchmark's long run)
        self._script: list[Reply] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as real API servers set it: else each small event waits for the client's
            # delayed ACK (40 ms)
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    body = {
                        "object": "list",
                        "data": [{"id": "gpt-5.5", "object": "model", "owned_by": "stand-in"}],
                    }
                    self._json(200, body)
                else:
                    self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._json(400, {"error": {"message": "invalid JSON", "type": "invalid_request_error"}})
                    return
                stand_in._serve(self, self.path, {k.lower(): v for k, v in self.headers.items()}, body)

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", "req_standin")
                self.end_headers()
                self.wfile.write(data)

        self.handler = Handler
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> OpenAIStandIn:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def _next(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.pop(0)
        if self.responder is not None:
            return self.responder(path, body, headers)
        return reply("(the stand-in has nothing scripted)")

    def _serve(self, handler: Any, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        chat = path.rstrip("/").endswith("/chat/completions")
        if not chat and not path.rstrip("/").endswith("/responses"):
            handler._json(404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}})
            return
        failures = chat_failures(body) if chat else responses_failures(body)
        tokens = chat_tokens(body) if chat else responses_tokens(body)
        record = Recorded(path, headers, body, tokens)
        refusals: list[str] = []
        if not chat:
            record.reasoning_kept, record.reasoning_dropped, refusals = check_reasoning(
                body, input_items(body)
            )
        with self._lock:
            if self.keep_requests:
                self.requests.append(record)
            self.dropped += record.reasoning_dropped
            self.failures += failures + refusals
        if failures or refusals:
            handler._json(
                400,
                {
                    "error": {
                        "message": (failures + refusals)[0],
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return
        if tokens > self.context_window:
            message = (
                f"Your input exceeds the context window of this model ({tokens} > {self.context_window} tokens)."
                " Please adjust your input and try again."
            )
            with self._lock:
                self.failures.append(f"over the window: {tokens} tokens")
            param = "messages" if chat else "input"
            err = {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": "context_length_exceeded",
            }
            handler._json(400, {"error": err})
            return
        answer = self._next(path, body, headers)
        if answer.error is not None:
            handler._json(*answer.error)
            return
        if chat:
            self._chat(handler, body, answer, tokens)
        else:
            self._responses(handler, body, answer, tokens)

    # -- Responses -----------------------------------------------------------------------------

    def output_items(self, body: dict[str, Any], answer: Reply) -> list[dict[str, Any]]:
        n = next(self._ids)
        items = input_items(body)
        before = [i for i in items if i.get("type") == "reasoning" and opened(i.get("encrypted_content"))]
        previous = str(before[-1].get("id")) if before else "none"
        out: list[dict[str, Any]] = []
        if answer.reasoning:
            reasoning: dict[str, Any] = {
                "type": "reasoning",
                "id": f"rs_{n:05d}",
                "summary": [{"type": "summary_text", "text": answer.reasoning}],
            }
            # only when asked for, as the real API returns it
            if "reasoning.encrypted_content" in (body.get("include") or []):
                reasoning["encrypted_content"] = mint(prefix_digests(body, items)[-1], previous)
            out.append(reasoning)
        if answer.text:
            out.append(
                {
                    "type": "message",
                    "id": f"msg_{n:05d}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            )
        for k, (name, args) in enumerate(answer.calls):
            arguments = args if isinstance(args, str) else json.dumps(args, separators=(",", ":"))
            out.append(
                {
                    "type": "function_call",
                    "id": f"fc_{n:05d}_{k}",
                    "call_id": f"call_{n:05d}_{k}",
                    "name": name,
                    "arguments": arguments,
                    "status": "completed",
                }
            )
        return out

    def _responses(self, handler: Any, body: dict[str, Any], answer: Reply, tokens: int) -> None:
        output = self.output_items(body, answer)
        output_tokens = sum(count(_text(i)) for i in output) + 10
        usage = {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 10},
            "total_tokens": tokens + output_tokens,
        }
        rid = f"resp_{next(self._ids):05d}"
        response = {
            "id": rid,
            "object": "response",
            "created_at": 1796600000,
            "status": "completed",
            "model": body.get("model"),
            "output": output,
            "usage": usage,
        }
        if not body.get("stream"):
            handler._json(200, response)
            return
        _start_stream(handler)
        seq = itertools.count()

        def send(data: dict[str, Any]) -> None:
            event = {**data, "sequence_number": next(seq)}
            _chunk(
                handler,
                b"event: " + data["type"].encode() + b"\ndata: " + json.dumps(event).encode() + b"\n\n",
            )

        opening = {**response, "status": "in_progress", "output": [], "usage": None}
        send({"type": "response.created", "response": opening})
        send({"type": "response.in_progress", "response": opening})
        for i, item in enumerate(output):
            for event in _item_events(i, item):
                send(event)
        send({"type": "response.completed", "response": response})
        _end_stream(handler)

    # -- Chat Completions ------------------------------------------------------------------------

    def _chat(self, handler: Any, body: dict[str, Any], answer: Reply, tokens: int) -> None:
        n = next(self._ids)
        calls = [
            {
                "id": f"call_{n:05d}_{k}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args, separators=(",", ":")),
                },
            }
            for k, (name, args) in enumerate(answer.calls)
        ]
        finish = "tool_calls" if calls else "stop"
        completion = count(answer.text) + sum(count(c["function"]["arguments"]) for c in calls) + 5
        usage = {
            "prompt_tokens": tokens,
            "completion_tokens": completion,
            "total_tokens": tokens + completion,
        }
        head = {"id": f"chatcmpl-{n:05d}", "created": 1796600000, "model": body.get("model")}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
            if calls:
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            handler._json(200, {**head, "object": "chat.completion", "choices": [choice], "usage": usage})
            return
        _start_stream(handler)

        def send(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            chunk = {**head, "object": "chat.completion.chunk", "choices": [choice]}
            _chunk(handler, b"data: " + json.dumps(chunk).encode() + b"\n\n")

        send({"role": "assistant", "content": ""})
        for piece in _pieces(answer.text):
            send({"content": piece})
        for k, call in enumerate(calls):
            send(
                {
                    "tool_calls": [
                        {
                            "index": k,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            for piece in _pieces(call["function"]["arguments"]):
                send({"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
        send({}, finish)
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            chunk = {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
            _chunk(handler, b"data: " + json.dumps(chunk).encode() + b"\n\n")
        _chunk(handler, b"data: [DONE]\n\n")
        _end_stream(handler)


def _pieces(text: str, size: int = 40) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    kind = item["type"]
    if kind == "message":
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        }
        part = {"type": "output_text", "text": "", "annotations": []}
        yield {
            "type": "response.content_part.added",
            "item_id": item["id"],
            "output_index": index,
            "content_index": 0,
            "part": part,
        }
        text = item["content"][0]["text"]
        for piece in _pieces(text):
            yield {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "delta": piece,
            }
        yield {
            "type": "response.output_text.done",
            "item_id": item["id"],
            "output_index": index,
            "content_index": 0,
            "text": text,
        }
        yield {
            "type": "response.content_part.done",
            "item_id": item["id"],
            "output_index": index,
            "content_index": 0,
            "part": {**part, "text": text},
        }
    elif kind == "function_call":
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        }
        for piece in _pieces(item["arguments"]):
            yield {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": index,
                "delta": piece,
            }
        yield {
            "type": "response.function_call_arguments.done",
            "item_id": item["id"],
            "output_index": index,
            "arguments": item["arguments"],
        }
    else:
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "summary": [], "encrypted_content": None},
        }
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def _start_stream(handler: Any) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("transfer-encoding", "chunked")
    handler.send_header("x-request-id", "req_standin")
    handler.end_headers()


def _chunk(handler: Any, data: bytes) -> None:
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def _end_stream(handler: Any) -> None:
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


DEMO_PORT = 8792  # the Messages stand-in's is 8790; 8791 is the README's other port for compactd


def main(argv: list[str] | None = None) -> None:
    """Serve until Ctrl-C: every request answered with a short note (nothing kept per request)."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.fakes.openai_api", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=DEMO_PORT, help="0: any free port (default %(default)s)")
    args = parser.parse_args(argv)
    with OpenAIStandIn(port=args.port) as api:
        api.keep_requests = False
        print(f"a local stand-in for OpenAI's APIs at {api.base_url} (Ctrl-C stops it)", flush=True)
        print(f"  compactd:   COMPACTD_OPENAI_UPSTREAM_URL={api.base_url} make up", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover - a manual stand-in
    main()
