"""The Chat Completions stream, relayed: upstream rounds in, the one completion the client expects out.

Pure: chunks in, bytes out. compactd always streams upstream with usage; the client gets one
stream: the role once, text and its own tool calls as they arrive (tool call indices contiguous
across rounds), one chunk with the last round's finish reason, the usage chunk only when it asked
for one (`stream_options.include_usage`: the last round's prompt tokens, every round's completion
tokens), then `[DONE]`. compactd's own tool calls never reach it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from worker.proxy.sse import Event
from worker.proxy.wire.chat import assistant_blocks
from worker.proxy.wire.responses import parse_arguments

DONE = b"data: [DONE]\n\n"
HEAD = ("id", "object", "created", "model", "system_fingerprint")  # what every chunk repeats
NO_CONTENT = "(no answer: compactd's tool round limit was reached)"


def encode(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


@dataclass
class Round:
    """One upstream call: the assistant message rebuilt from its deltas."""

    text: str = ""
    reasoning: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # upstream index -> call
    hidden: set[int] = field(default_factory=set)
    held: set[int] = field(default_factory=set)  # calls whose name could still become compactd's
    index_map: dict[int, int] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    head: dict[str, Any] = field(default_factory=dict)  # id, created, model ... of its first chunk
    done: bool = False
    error: bool = False

    def visible_calls(self) -> list[dict[str, Any]]:
        return [self.calls[i] for i in sorted(self.calls) if i not in self.hidden]

    def hidden_calls(self) -> list[dict[str, Any]]:
        return [self.calls[i] for i in sorted(self.hidden) if i in self.calls]

    def message(self, calls: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if calls:
            out["tool_calls"] = calls
        return out


class ChatRelay:
    """Upstream rounds in, the client's single completion stream out."""

    def __init__(self, hidden_tools: frozenset[str], include_usage: bool) -> None:
        self.hidden_tools = hidden_tools
        self.include_usage = include_usage
        self.rounds: list[Round] = []
        self._next_index = 0
        self.filler = False

    def start_round(self) -> Round:
        self.rounds.append(Round())
        return self.rounds[-1]

    @property
    def current(self) -> Round:
        return self.rounds[-1]

    def feed(self, event: Event) -> bytes:
        r = self.current
        data = event.data
        if not isinstance(data, dict):
            if event.payload.strip() == b"[DONE]":
                r.done = True
                return b""
            return event.raw
        if "error" in data and "choices" not in data:
            r.error = True
            return event.raw
        if not r.head:
            r.head = {
                k: data[k] for k in ("id", "object", "created", "model", "system_fingerprint") if k in data
            }
        if isinstance(data.get("usage"), dict):
            r.usage = data["usage"]
        choices = data.get("choices") or []
        if not choices:
            return b""  # the usage chunk: held for the end
        choice = dict(choices[0])
        delta = dict(choice.get("delta") or {})
        changed = self._absorb(r, delta)
        if choice.get("finish_reason") is not None:
            r.finish_reason = choice.pop("finish_reason")
            self._release_held(r, delta)
            changed = True
        if len(self.rounds) > 1 and "role" in delta:
            delta.pop("role")
        if not delta and not choice.get("logprobs"):
            return b""  # nothing left for the client (the finish reason comes at the end)
        if not changed and data.get("usage") is None:
            return event.raw
        return encode(self._chunk(data, choice, delta))

    def _chunk(self, data: dict[str, Any], choice: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in data.items() if k != "usage"}
        out["choices"] = [{**choice, "delta": delta}]
        return {**out, **self._head()}

    def _head(self) -> dict[str, Any]:
        first = self.rounds[0].head
        return {k: first[k] for k in ("id", "created") if k in first}

    def _absorb(self, r: Round, delta: dict[str, Any]) -> bool:
        """Take the delta's text and tool calls into the round; True when the delta was changed
        for the client (a hidden call left out, an index moved)."""
        if isinstance(delta.get("content"), str):
            r.text += delta["content"]
        if isinstance(delta.get("reasoning_content"), str):
            r.reasoning += delta["reasoning_content"]
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            return len(self.rounds) > 1
        kept, changed = [], False
        for call in calls:
            index = call.get("index") if isinstance(call, dict) else None
            if not isinstance(index, int):
                kept.append(call)
                continue
            current = r.calls.setdefault(
                index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            fn = call.get("function") or {}
            if call.get("id"):
                current["id"] = call["id"]
            if fn.get("name"):
                current["function"]["name"] += fn["name"]
                if current["function"]["name"] in self.hidden_tools:
                    r.hidden.add(index)
            if isinstance(fn.get("arguments"), str):
                current["function"]["arguments"] += fn["arguments"]
            if index in r.hidden:
                r.held.discard(index)
                changed = True
                continue
            if index not in r.index_map and self._undecided(current["function"]["name"]):
                # a name streamed in pieces ("read_" then "file"): nothing of it goes out until
                # it is known not to be compactd's
                r.held.add(index)
                changed = True
                continue
            if index in r.held:
                call, changed = self._release(r, index), True
            shown = self._client_index(r, index)
            if call["index"] != shown:
                call = {**call, "index": shown}
                changed = True
            kept.append(call)
        if kept:
            delta["tool_calls"] = kept
        else:
            delta.pop("tool_calls")
        return changed or len(self.rounds) > 1

    def _undecided(self, name: str) -> bool:
        """The name so far could still become one of compactd's tools (and is none yet)."""
        return name not in self.hidden_tools and any(h.startswith(name) for h in self.hidden_tools)

    def _client_index(self, r: Round, index: int) -> int:
        """The index the client knows an upstream call by (contiguous across rounds)."""
        if index not in r.index_map:
            r.index_map[index] = self._next_index
            self._next_index += 1
        return r.index_map[index]

    def _release(self, r: Round, index: int) -> dict[str, Any]:
        """A held call as one delta, at its client index: everything it streamed so far."""
        r.held.discard(index)
        c = r.calls[index]
        out = {"index": self._client_index(r, index), "type": "function", "function": dict(c["function"])}
        return {**out, "id": c["id"]} if c["id"] else out

    def _release_held(self, r: Round, delta: dict[str, Any]) -> None:
        """At the round's end, a held call whose name stayed a prefix of compactd's (a client's tool
        named `read`) is the client's: it goes out whole."""
        released = [self._release(r, index) for index in sorted(r.held)]
        if released:
            delta["tool_calls"] = [*(delta.get("tool_calls") or []), *released]

    def round_done(self) -> bool:
        return self.current.done

    def hidden_tool_uses(self) -> list[dict[str, Any]]:
        """compactd's calls of the current round as tool_use blocks."""
        return [
            {
                "type": "tool_use",
                "id": c["id"],
                "name": c["function"]["name"],
                "input": parse_arguments(c["function"]["arguments"]),
            }
            for c in self.current.hidden_calls()
        ]

    def extend_request(self, body: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
        body["messages"] = [*body["messages"], *self.next_messages(results)]
        return body

    def error_event(self, payload: dict[str, Any]) -> bytes:
        """A chunk holding the error (what OpenAI-compatible servers send mid-stream)."""
        return encode(payload)

    def should_continue(self, max_rounds: int) -> bool:
        r = self.current
        return (
            r.done
            and r.finish_reason == "tool_calls"
            and bool(r.hidden_calls())
            and not r.visible_calls()
            and len(self.rounds) < max_rounds
        )

    def final_finish_reason(self) -> str | None:
        r = self.current
        if r.finish_reason == "tool_calls" and not r.visible_calls():
            return "stop"  # the round limit stopped compactd's own calls: nothing for the client to run
        return r.finish_reason

    def usage(self) -> dict[str, Any] | None:
        last = self.current.usage
        if last is None:
            return None
        completion = sum(int((r.usage or {}).get("completion_tokens") or 0) for r in self.rounds)
        prompt = int(last.get("prompt_tokens") or 0)
        return {**last, "completion_tokens": completion, "total_tokens": prompt + completion}

    def visible_calls(self) -> list[dict[str, Any]]:
        return [{**c, "index": n} for n, c in enumerate(c for r in self.rounds for c in r.visible_calls())]

    def text(self) -> str:
        """Every round's text; when compactd's own rounds left the client nothing, a short note."""
        text = "".join(r.text for r in self.rounds)
        if not text and not self.visible_calls() and (len(self.rounds) > 1 or self.current.hidden):
            self.filler = True
            return NO_CONTENT
        return text

    def failed(self) -> bool:
        return False

    def finish(self) -> bytes:
        """The closing chunks: the finish reason, the usage when asked for, [DONE]."""
        out = b""
        first = self.rounds[0].head
        base: dict[str, Any] = {k: first[k] for k in HEAD if k in first}
        base.setdefault("object", "chat.completion.chunk")
        self.text()  # sets the filler when the client saw nothing
        if self.filler:
            out += encode(
                {**base, "choices": [{"index": 0, "delta": {"content": NO_CONTENT}, "finish_reason": None}]}
            )
        out += encode(
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": self.final_finish_reason()}]}
        )
        usage = self.usage()
        if self.include_usage and usage is not None:
            out += encode({**base, "choices": [], "usage": usage})
        return out + DONE

    def client_message(self) -> dict[str, Any]:
        """The assistant message as the client's next request will carry it, canonical."""
        calls = [{k: v for k, v in c.items() if k != "index"} for c in self.visible_calls()]
        message = {"role": "assistant", "content": self.text() or None, "tool_calls": calls}
        return {
            "role": "assistant",
            "content": assistant_blocks(message, "reply") or [{"type": "text", "text": NO_CONTENT}],
        }

    def client_response(self) -> dict[str, Any]:
        """The non-streaming completion."""
        first = self.rounds[0].head
        message: dict[str, Any] = {"role": "assistant", "content": self.text() or None}
        calls = [{k: v for k, v in c.items() if k != "index"} for c in self.visible_calls()]
        if calls:
            message["tool_calls"] = calls
        reasoning = "".join(r.reasoning for r in self.rounds)
        if reasoning:
            message["reasoning_content"] = reasoning
        out: dict[str, Any] = {
            "id": first.get("id", ""),
            "object": "chat.completion",
            "created": first.get("created", 0),
            "model": first.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": self.final_finish_reason(),
                    "logprobs": None,
                }
            ],
        }
        if "system_fingerprint" in first:
            out["system_fingerprint"] = first["system_fingerprint"]
        usage = self.usage()
        if usage is not None:
            out["usage"] = usage
        return out

    def stored_messages(self, results: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for r, answered in zip(self.rounds[:-1], results, strict=False):
            calls = [c for i, c in sorted(r.calls.items())]
            out.append({"role": "assistant", "content": assistant_blocks(r.message(calls), "round")})
            out.append({"role": "user", "content": answered})
        if len(self.rounds) == 1:
            out.append(self.client_message())
        else:  # the last round as the client saw it (the earlier rounds' text is stored above)
            last = self.current
            message = last.message(last.visible_calls())
            out.append(
                {
                    "role": "assistant",
                    "content": assistant_blocks(message, "reply") or [{"type": "text", "text": NO_CONTENT}],
                }
            )
        return out

    def next_messages(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages the next round's request appends: this round's assistant message, then a
        tool message for each of compactd's calls."""
        r = self.current
        calls = [c for _, c in sorted(r.calls.items())]
        tools = [
            {"role": "tool", "tool_call_id": str(b.get("tool_use_id")), "content": _text(b.get("content"))}
            for b in results
        ]
        return [r.message(calls), *tools]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
