"""The Responses API's event stream, relayed: upstream rounds in, the one response the client expects out.

Pure: events in, bytes out. When the model calls compactd's own tools (read_file, grep,
update_working_memory) the proxy answers them and calls upstream again; the client sees one
response: the first round's `response.created`, every visible output item with `output_index`
contiguous across rounds, `sequence_number` increasing, and one terminal event whose `output` holds
every visible item and whose usage is the last round's input (what was sent last) with every
round's output. compactd's calls and their events never reach the client. A round without any of
compactd's calls is passed on byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from worker.proxy.sse import Event
from worker.proxy.wire.responses import canonical_messages, parse_arguments

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
OPENING = ("response.created", "response.in_progress", "response.queued")
NO_CONTENT = "(no answer: compactd's tool round limit was reached)"


def encode(data: dict[str, Any]) -> bytes:
    return b"event: " + str(data.get("type", "")).encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@dataclass
class Round:
    """One upstream call, as the relay saw it."""

    items: dict[int, dict[str, Any]] = field(default_factory=dict)  # output_index -> item when done
    hidden: set[int] = field(default_factory=set)  # output indices of compactd's calls
    index_map: dict[int, int] = field(default_factory=dict)  # upstream output_index -> client's
    final: dict[str, Any] | None = None  # the terminal event's data
    final_raw: bytes = b""  # and as it came
    error: bool = False

    @property
    def done(self) -> bool:
        return self.final is not None

    def output(self) -> list[dict[str, Any]]:
        """Every output item, in order (the terminal event's own list when no item event came)."""
        if self.items:
            return [self.items[i] for i in sorted(self.items)]
        return list(((self.final or {}).get("response") or {}).get("output") or [])

    def visible(self) -> list[dict[str, Any]]:
        if self.items:
            return [self.items[i] for i in sorted(self.items) if i not in self.hidden]
        return self.output()

    def hidden_calls(self) -> list[dict[str, Any]]:
        return [self.items[i] for i in sorted(self.hidden) if i in self.items]

    def visible_call(self) -> bool:
        return any(str(i.get("type", "")).endswith("_call") for i in self.visible())


class ResponsesRelay:
    """Upstream rounds in, the client's single response stream out."""

    def __init__(self, hidden_tools: frozenset[str]) -> None:
        self.hidden_tools = hidden_tools
        self.rounds: list[Round] = []
        self.first: dict[str, Any] = {}  # the first round's response object (its id is the client's)
        self._next_index = 0
        self._seq = 0  # the next sequence_number the client may see
        self.filler = False

    def start_round(self) -> Round:
        self.rounds.append(Round())
        return self.rounds[-1]

    @property
    def current(self) -> Round:
        return self.rounds[-1]

    def feed(self, event: Event) -> bytes:
        """What to send the client for this upstream event (b"" for nothing)."""
        r = self.current
        data = event.data if isinstance(event.data, dict) else None
        if data is None:
            return event.raw
        kind = str(data.get("type") or event.name)
        if kind in OPENING:
            if len(self.rounds) > 1:
                return b""
            if kind == "response.created":
                self.first = dict(data.get("response") or {})
            if self._lists_hidden(data.get("response")):
                data = {**data, "response": self._shown(data["response"])}
                return encode(self._numbered(data))
            return self._passed(event, data)
        if kind in TERMINAL:
            r.final, r.final_raw = data, event.raw
            return b""  # held: the relay decides whether the response ends here
        if kind == "error":
            r.error = True
            return self._passed(event, data)
        index = data.get("output_index")
        if not isinstance(index, int):
            return self._passed(event, data)
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call" and item.get("name") in self.hidden_tools:
                r.hidden.add(index)
                return b""
            r.index_map[index] = self._next_index
            self._next_index += 1
        if kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            r.items[index] = data["item"]
        if index in r.hidden:
            return b""
        return self._passed(event, data, r.index_map.get(index, index))

    def _passed(self, event: Event, data: dict[str, Any], index: int | None = None) -> bytes:
        """The event for the client: as it came when its numbers already are the client's."""
        seq = data.get("sequence_number")
        same_index = index is None or data.get("output_index") == index
        if same_index and (not isinstance(seq, int) or seq >= self._seq) and len(self.rounds) == 1:
            if isinstance(seq, int):
                self._seq = seq + 1
            return event.raw
        out = dict(data)
        if index is not None:
            out["output_index"] = index
        if isinstance(seq, int):
            out["sequence_number"] = self._seq
            self._seq += 1
        return encode(out)

    def round_done(self) -> bool:
        return self.current.done

    def hidden_tool_uses(self) -> list[dict[str, Any]]:
        """compactd's calls of the current round as tool_use blocks."""
        return [
            {
                "type": "tool_use",
                "id": c.get("call_id"),
                "name": c.get("name"),
                "input": parse_arguments(c.get("arguments")),
            }
            for c in self.current.hidden_calls()
        ]

    def extend_request(self, body: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
        body["input"] = [*body["input"], *self.next_input(results)]
        return body

    def error_event(self, payload: dict[str, Any]) -> bytes:
        """An `error` event (`{"error": {...}}` in OpenAI's shape read into the event's fields)."""
        error = payload.get("error") or {}
        return encode(
            self._numbered(
                {
                    "type": "error",
                    "code": error.get("code") or error.get("type"),
                    "message": error.get("message"),
                    "param": None,
                }
            )
        )

    def should_continue(self, max_rounds: int) -> bool:
        """The round asked only for compactd's tools: answer them and call upstream again."""
        r = self.current
        return (
            r.done
            and str((r.final or {}).get("type")) == "response.completed"
            and bool(r.hidden_calls())
            and not r.visible_call()
            and len(self.rounds) < max_rounds
        )

    def visible_output(self) -> list[dict[str, Any]]:
        """Every visible item; when compactd's own rounds left the client nothing, a short note."""
        out = [i for r in self.rounds for i in r.visible()]
        if not out and (len(self.rounds) > 1 or self.current.hidden):
            self.filler = True
            return [_filler()]
        return out

    def usage(self) -> dict[str, Any]:
        """The last round's input (what was really sent last), every round's output."""
        last = (((self.current.final or {}).get("response")) or {}).get("usage") or {}
        rounds = [((r.final or {}).get("response") or {}).get("usage") or {} for r in self.rounds]
        output = sum(int(u.get("output_tokens") or 0) for u in rounds)
        reasoning = sum(
            int((u.get("output_tokens_details") or {}).get("reasoning_tokens") or 0) for u in rounds
        )
        usage = dict(last)
        usage["output_tokens"] = output
        if "output_tokens_details" in last or reasoning:
            usage["output_tokens_details"] = {
                **(last.get("output_tokens_details") or {}),
                "reasoning_tokens": reasoning,
            }
        usage["total_tokens"] = int(last.get("input_tokens") or 0) + output
        return usage

    def client_response(self) -> dict[str, Any]:
        """The response object as the client gets it in the terminal event (or the JSON answer)."""
        final = dict(((self.current.final or {}).get("response")) or {})
        response = {**final, **{k: v for k, v in self.first.items() if k in ("id", "created_at")}}
        response = self._shown(response) if self._lists_hidden(response) else response
        response["output"] = self.visible_output()
        if final.get("usage") is not None or len(self.rounds) > 1:
            response["usage"] = self.usage()
        if response.get("status") == "completed" or "status" not in response:
            response["status"] = "completed"
        return response

    def finish(self) -> bytes:
        """The terminal event: the upstream's own when one round had nothing hidden, else one that
        holds every visible item (and the filler, when the client saw no output at all)."""
        r = self.current
        final = r.final or {"type": "response.completed"}
        plain = not self._lists_hidden(final.get("response"))
        if len(self.rounds) == 1 and not r.hidden and r.final is not None and plain:
            seq = final.get("sequence_number")
            if not isinstance(seq, int) or seq >= self._seq:
                return r.final_raw
        out = b""
        response = self.client_response()
        if self.filler:
            item = response["output"][0]
            out += encode(
                self._numbered({"type": "response.output_item.added", "output_index": 0, "item": item})
            )
            out += encode(
                self._numbered({"type": "response.output_item.done", "output_index": 0, "item": item})
            )
        kind = str(final.get("type") or "response.completed")
        return out + encode(self._numbered({"type": kind, "response": response}))

    def _is_hidden(self, tool: Any) -> bool:
        return isinstance(tool, dict) and tool.get("name") in self.hidden_tools

    def _lists_hidden(self, response: Any) -> bool:
        """Whether a response object lists compactd's own tools (the client never sees them)."""
        tools = response.get("tools") if isinstance(response, dict) else None
        return isinstance(tools, list) and any(self._is_hidden(t) for t in tools)

    def _shown(self, response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "tools": [t for t in response.get("tools") or [] if not self._is_hidden(t)]}

    def failed(self) -> bool:
        """The upstream's answer failed (a terminal `response.failed`): nothing to record."""
        return str((self.current.final or {}).get("type")) == "response.failed"

    def _numbered(self, data: dict[str, Any]) -> dict[str, Any]:
        data = {**data, "sequence_number": self._seq}
        self._seq += 1
        return data

    def final_status(self) -> str:
        return str((((self.current.final or {}).get("response")) or {}).get("status") or "")

    def client_message(self) -> dict[str, Any]:
        """The assistant message as the client's next request will carry it (its visible items)."""
        return _one_message(self.visible_output())

    def stored_messages(self, results: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """What the session stores: each server-side round (its items, compactd's calls included,
        then their results) and the final output as the client saw it."""
        out: list[dict[str, Any]] = []
        for r, answered in zip(self.rounds[:-1], results, strict=False):
            out.append(_one_message(r.output()))
            out.append({"role": "user", "content": answered})
        # the last round as the client saw it (the earlier rounds' visible items are stored above)
        last = self.current.visible() if len(self.rounds) > 1 else self.visible_output()
        out.append(_one_message(last))
        return out

    def next_input(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items the next round's request appends: this round's output as received, then an
        output item for each of compactd's calls."""
        outputs = [
            {
                "type": "function_call_output",
                "call_id": str(b.get("tool_use_id")),
                "output": _text(b.get("content")),
            }
            for b in results
        ]
        # the round's items as received, less the ids and statuses of what is not reasoning (with
        # `store: false` an id names nothing the upstream kept)
        items = [
            i if i.get("type") == "reasoning" else {k: v for k, v in i.items() if k not in ("id", "status")}
            for i in self.current.output()
        ]
        return [*items, *outputs]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))


def _filler() -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_compactd_no_content",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": NO_CONTENT, "annotations": []}],
    }


def _one_message(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Output items as one canonical assistant message (outputs are the model's side)."""
    blocks = [b for m in canonical_messages(items, "output") for b in m["content"]]
    return {"role": "assistant", "content": blocks or [{"type": "text", "text": NO_CONTENT}]}


def text_response(response_id: str, model: Any, text: str, usage: dict[str, Any]) -> dict[str, Any]:
    """A completed response holding one assistant message (compactd's own answer, no upstream)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": model,
        "output": [
            {
                "type": "message",
                "id": f"msg_{response_id.removeprefix('resp_')}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": usage,
    }


def response_stream(response: dict[str, Any]) -> bytes:
    """The events a streamed response with one message item sends, at once."""
    item = response["output"][0]
    text = item["content"][0]["text"]
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": item["id"],
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
        {
            "type": "response.output_text.delta",
            "item_id": item["id"],
            "output_index": 0,
            "content_index": 0,
            "delta": text,
        },
        {
            "type": "response.output_text.done",
            "item_id": item["id"],
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.content_part.done",
            "item_id": item["id"],
            "output_index": 0,
            "content_index": 0,
            "part": {**part, "text": text},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]
    return b"".join(encode({**e, "sequence_number": n}) for n, e in enumerate(events))
