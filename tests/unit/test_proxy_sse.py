"""The stream relay: upstream SSE rounds in, one valid client message stream out, the reply rebuilt exactly."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes.messages_api import sse_events, thinking_block
from worker.proxy.fingerprints import chains
from worker.proxy.sse import Assembler, Event, EventSplitter, Relay, encode_event

HIDDEN = frozenset({"read_file", "grep", "update_working_memory"})


def _message(*content: dict[str, Any], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 1234, "output_tokens": 7},
    }


def _wire(message: dict[str, Any]) -> bytes:
    return b"".join(encode_event(name, data) for name, data in sse_events(message))


def _events(data: bytes) -> list[Event]:
    return list(EventSplitter().feed(data))


def _rebuilt(data: bytes) -> Assembler:
    a = Assembler()
    for e in _events(data):
        a.feed(e)
    return a


TEXT = {"type": "text", "text": "Let me look at the failing test first, then fix it."}
BASH = {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {"command": "pytest -x", "timeout": 60}}
READ = {"type": "tool_use", "id": "toolu_r", "name": "read_file", "input": {"ref": "f_0123", "start_line": 1}}
THINK = thinking_block("The error says KeyError, so the dict lookup must be guarded.")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4000), max_size=30))
def test_events_split_the_same_wherever_the_bytes_are_cut(cuts: list[int]) -> None:
    """Chunk boundaries anywhere (mid-line, mid-UTF-8 JSON) give the same events as the whole stream."""
    wire = _wire(_message(THINK, TEXT, BASH, stop_reason="tool_use")).replace(b"\n", b"\r\n")
    splitter, got = EventSplitter(), []
    at = 0
    for cut in [*sorted({min(c, len(wire)) for c in cuts}), len(wire)]:
        got += list(splitter.feed(wire[at:cut]))
        at = cut
    assert [(e.name, e.data) for e in got] == [(e.name, e.data) for e in _events(wire)]


def test_the_assembler_rebuilds_the_message_exactly() -> None:
    """Text, tool input (from JSON pieces) and thinking with its signature come out as sent."""
    message = _message(THINK, TEXT, BASH, stop_reason="tool_use")
    assert _rebuilt(_wire(message)).as_message() == {
        **message,
        "usage": {"input_tokens": 1234, "output_tokens": 7},
    }


def test_one_round_is_relayed_unchanged() -> None:
    """Without compactd's tools the client gets the upstream's events as they came, then the close."""
    wire = _wire(_message(THINK, TEXT, BASH, stop_reason="tool_use"))
    relay = Relay(HIDDEN)
    relay.start_round()
    out = b"".join(relay.feed(e) for e in _events(wire))
    assert not relay.should_continue(5)
    out += relay.finish()
    assert out == wire
    assert relay.client_message()["content"] == [THINK, TEXT, BASH]
    assert relay.stored_messages([]) == [relay.client_message()]


def test_a_server_side_round_is_invisible_to_the_client() -> None:
    """The model reads a compactd file, then calls the client's tool: the client sees one message
    (contiguous indices, one start, one stop, no read_file), the session stores both rounds, and the
    client's copy fingerprints like the relay's."""
    relay = Relay(HIDDEN)
    relay.start_round()
    out = b"".join(relay.feed(e) for e in _events(_wire(_message(TEXT, READ, stop_reason="tool_use"))))
    assert relay.should_continue(5)
    assert relay.current.hidden_calls() == [READ]
    relay.start_round()
    second = _message(THINK, {"type": "text", "text": "Found it."}, BASH, stop_reason="tool_use")
    out += b"".join(relay.feed(e) for e in _events(_wire(second)))
    assert not relay.should_continue(5)
    out += relay.finish()
    events = _events(out)
    assert [e.name for e in events].count("message_start") == 1
    assert [e.name for e in events].count("message_stop") == 1
    assert [e.data["index"] for e in events if e.name == "content_block_start"] == [0, 1, 2, 3]
    seen = _rebuilt(out)
    assert seen.content() == [TEXT, THINK, {"type": "text", "text": "Found it."}, BASH]
    assert seen.stop_reason == "tool_use" and seen.usage["output_tokens"] == 14
    result = {"type": "tool_result", "tool_use_id": "toolu_r", "content": "[f_0123: lines 1-3]"}
    stored = relay.stored_messages([[result]])
    assert [m["role"] for m in stored] == ["assistant", "user", "assistant"]
    assert stored[0]["content"] == [TEXT, READ] and stored[2]["content"] == second["content"]
    client_copy = {"role": "assistant", "content": seen.content()}
    assert chains(b"k", [client_copy]) == chains(b"k", [relay.client_message()])


def test_a_round_mixing_both_kinds_of_tools_ends_with_the_clients() -> None:
    """compactd's call next to the client's cannot be answered server-side: the client gets its own
    call, and the session stores the message as the client saw it."""
    relay = Relay(HIDDEN)
    relay.start_round()
    for e in _events(_wire(_message(TEXT, READ, BASH, stop_reason="tool_use"))):
        relay.feed(e)
    assert not relay.should_continue(5)
    relay.finish()
    assert relay.client_message()["content"] == [TEXT, BASH]
    assert relay.stored_messages([]) == [relay.client_message()]


def test_the_round_limit_ends_the_message_cleanly() -> None:
    """At the limit with only compactd's calls left the client gets a text block and end_turn, never a dangling tool_use."""
    relay = Relay(HIDDEN)
    relay.start_round()
    for e in _events(_wire(_message(READ, stop_reason="tool_use"))):
        relay.feed(e)
    assert not relay.should_continue(1)
    out = _rebuilt(relay.finish())
    assert out.stop_reason == "end_turn"
    assert [b["type"] for b in relay.client_message()["content"]] == ["text"]
    assert relay.stored_messages([])[-1]["content"] == relay.client_message()["content"]
