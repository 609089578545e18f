"""Server-sent events of the Messages API: split, reassembled into a message, relayed to the client.

Pure: bytes and dicts in, bytes and dicts out. The relay turns one or more upstream rounds (the
model calling compactd's own tools in between) into the one message stream the client expects:
compactd's tool calls never reach it, block indices stay contiguous, one message_start, one
message_stop. Text is passed on event by event, never held back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    data: Any  # the parsed JSON (None when it is not JSON)
    raw: bytes  # the event as received, blank line included
    payload: bytes = b""  # its data lines joined (`[DONE]` is data that is not JSON)


class EventSplitter:
    """Complete events out of a byte stream cut anywhere."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> Iterator[Event]:
        # on the whole buffer: a CR LF may be cut between two chunks
        self._buffer = (self._buffer + chunk).replace(b"\r\n", b"\n")
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                return
            raw, self._buffer = self._buffer[: end + 2], self._buffer[end + 2 :]
            event = parse_event(raw)
            if event is not None:
                yield event


def parse_event(raw: bytes) -> Event | None:
    name, data = "", []
    for line in raw.split(b"\n"):
        if line.startswith(b"event:"):
            name = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip())
    if not name and not data:
        return None
    payload = b"\n".join(data)
    try:
        parsed = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        parsed = None
    if not name and isinstance(parsed, dict):
        name = str(parsed.get("type", ""))
    return Event(name, parsed, raw, payload)


def encode_event(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class Assembler:
    """One upstream message rebuilt from its events: text, tool_use input (from its JSON deltas),
    thinking with its signature, exactly as a non-streamed response would hold them."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage: dict[str, Any] = {}
        self.done = False

    def feed(self, event: Event) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        kind = event.name
        if kind == "message_start":
            self.message = dict(data.get("message") or {})
            self.usage = dict(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[data["index"]] = dict(data.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(data["index"], data.get("delta") or {})
        elif kind == "content_block_stop":
            self._stop(data["index"])
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            self.stop_reason = delta.get("stop_reason", self.stop_reason)
            self.stop_sequence = delta.get("stop_sequence", self.stop_sequence)
            self.usage.update(data.get("usage") or {})
        elif kind == "message_stop":
            self.done = True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
        elif kind == "input_json_delta":
            self._json[index] = self._json.get(index, "") + delta.get("partial_json", "")
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    def _stop(self, index: int) -> None:
        partial = self._json.pop(index, None)
        if partial is not None and index in self.blocks:
            try:
                self.blocks[index]["input"] = orjson.loads(partial) if partial.strip() else {}
            except orjson.JSONDecodeError:
                self.blocks[index]["input"] = {}

    def content(self) -> list[dict[str, Any]]:
        return [self.blocks[i] for i in sorted(self.blocks)]

    def as_message(self) -> dict[str, Any]:
        """The whole response, as the non-streaming API returns it."""
        return {
            **self.message,
            "content": self.content(),
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage,
        }


@dataclass
class Round:
    """One upstream call of a proxied request, as the relay saw it."""

    assembler: Assembler = field(default_factory=Assembler)
    hidden: set[int] = field(default_factory=set)  # upstream indices of compactd's tool calls
    index_map: dict[int, int] = field(default_factory=dict)  # upstream index -> client index
    error: bool = False

    def hidden_calls(self) -> list[dict[str, Any]]:
        return [self.assembler.blocks[i] for i in sorted(self.hidden) if i in self.assembler.blocks]

    def visible_blocks(self) -> list[dict[str, Any]]:
        return [b for i, b in sorted(self.assembler.blocks.items()) if i not in self.hidden]

    def visible_tool_use(self) -> bool:
        return any(b.get("type") == "tool_use" for b in self.visible_blocks())


class Relay:
    """Upstream rounds in, the client's single message stream out (see the module docstring)."""

    def __init__(self, hidden_tools: frozenset[str]) -> None:
        self.hidden_tools = hidden_tools
        self.rounds: list[Round] = []
        self._next_index = 0
        self.output_tokens = 0

    def start_round(self) -> Round:
        self.rounds.append(Round())
        return self.rounds[-1]

    @property
    def current(self) -> Round:
        return self.rounds[-1]

    def feed(self, event: Event) -> bytes:
        """What to send the client for this upstream event (b"" for nothing)."""
        r = self.current
        r.assembler.feed(event)
        data = event.data if isinstance(event.data, dict) else {}
        name = event.name
        if name == "message_start":
            return event.raw if len(self.rounds) == 1 else b""
        index = data.get("index")
        if name.startswith("content_block_") and not isinstance(index, int):
            return event.raw  # not an event of the documented shape: passed on as it came
        if name == "content_block_start":
            assert isinstance(index, int)
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use" and block.get("name") in self.hidden_tools:
                r.hidden.add(index)
                return b""
            r.index_map[index] = self._next_index
            self._next_index += 1
            return self._reindexed(event, r.index_map[index])
        if name in ("content_block_delta", "content_block_stop"):
            if index in r.hidden or index not in r.index_map:
                return b""
            return self._reindexed(event, r.index_map[index])
        if name == "message_delta":
            self.output_tokens += int((data.get("usage") or {}).get("output_tokens") or 0)
            self._last_delta = event
            return b""  # held: the relay decides whether the message ends here
        if name == "message_stop":
            return b""
        if name == "error":
            r.error = True
        return event.raw

    def _reindexed(self, event: Event, index: int) -> bytes:
        if event.data.get("index") == index:
            return event.raw
        return encode_event(event.name, {**event.data, "index": index})

    def should_continue(self, max_rounds: int) -> bool:
        """The round asked only for compactd's tools: answer them and call upstream again."""
        r = self.current
        return (
            r.assembler.done
            and r.assembler.stop_reason == "tool_use"
            and bool(r.hidden)
            and not r.visible_tool_use()
            and len(self.rounds) < max_rounds
        )

    def round_done(self) -> bool:
        return self.current.assembler.done

    def failed(self) -> bool:
        return False  # an error event ends the stream (`current.error`)

    def hidden_tool_uses(self) -> list[dict[str, Any]]:
        """compactd's tool calls of the current round (tool_use blocks)."""
        return self.current.hidden_calls()

    def extend_request(self, body: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
        """The next round's request: this round's message and compactd's tool results appended."""
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": self.current.assembler.content()},
            {"role": "user", "content": results},
        ]
        return body

    def error_event(self, payload: dict[str, Any]) -> bytes:
        """An error told mid-stream (the status line was 200), as the API tells one."""
        return encode_event("error", payload)

    def final_stop_reason(self) -> str | None:
        r = self.current
        reason = r.assembler.stop_reason
        if reason == "tool_use" and not r.visible_tool_use():
            return "end_turn"  # the round limit stopped compactd's own calls: nothing for the client to run
        return reason

    def finish(self) -> bytes:
        """The closing events: one message_delta (the last round's stop reason, every round's
        output tokens) and message_stop; a text block first if the client saw no content at all."""
        out = b""
        if self._next_index == 0:
            out += encode_event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
            out += encode_event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": NO_CONTENT},
                },
            )
            out += encode_event("content_block_stop", {"type": "content_block_stop", "index": 0})
            self._next_index = 1
            self.filler = True
        r = self.current.assembler
        last = self._last_delta
        reason = self.final_stop_reason()
        if last is not None and len(self.rounds) == 1 and reason == r.stop_reason:
            out += last.raw  # one round: the upstream's own event, unchanged
        else:
            # the last round's delta (its usage: what was really sent last), every round's output tokens
            data = dict(last.data) if last is not None and isinstance(last.data, dict) else {}
            usage = {**(data.get("usage") or {}), "output_tokens": self.output_tokens}
            delta = {**(data.get("delta") or {}), "stop_reason": reason, "stop_sequence": r.stop_sequence}
            out += encode_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        out += encode_event("message_stop", {"type": "message_stop"})
        return out

    filler = False
    _last_delta: Event | None = None

    def client_message(self) -> dict[str, Any]:
        """The assistant message as the client received it (what its next request will carry)."""
        content = [b for r in self.rounds for b in r.visible_blocks()]
        if not content:
            content = [{"type": "text", "text": NO_CONTENT}]
        return {"role": "assistant", "content": content}

    def client_response(self) -> dict[str, Any]:
        """The non-streaming response: the first round's message with every visible block."""
        first, last = self.rounds[0].assembler, self.current.assembler
        usage = {**first.usage, "output_tokens": self.output_tokens or last.usage.get("output_tokens", 0)}
        return {
            **first.message,
            "content": self.client_message()["content"],
            "stop_reason": self.final_stop_reason(),
            "stop_sequence": last.stop_sequence,
            "usage": usage,
        }

    def stored_messages(self, tool_results: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """What the session stores for this response: each server-side round (the model's message
        with compactd's calls, then their results) and the final message as the client saw it."""
        out: list[dict[str, Any]] = []
        for r, results in zip(self.rounds[:-1], tool_results, strict=False):
            out.append({"role": "assistant", "content": r.assembler.content()})
            out.append({"role": "user", "content": results})
        last = self.current
        content = last.visible_blocks() if last.hidden else last.assembler.content()
        out.append({"role": "assistant", "content": content or [{"type": "text", "text": NO_CONTENT}]})
        return out


NO_CONTENT = "(no answer: compactd's tool round limit was reached)"
