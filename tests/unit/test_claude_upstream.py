"""The Claude Code stand-in's own logic (tests/fakes/claude_upstream.py): its checks can fail, and it
answers from what a request carries."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.fakes.claude_upstream import (
    ClaudeUpstream,
    bash_command,
    expected_line,
    output_lines,
    request_failures,
    stream_events,
)

TOOLS = [
    {"name": "Bash", "input_schema": {"type": "object"}},
    {"name": "read_file", "input_schema": {"type": "object"}},
]


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 1000,
        "system": "be brief",
        "tools": TOOLS,
        "messages": list(messages),
        **extra,
    }


def user(*content: Any) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "text", "text": c} if isinstance(c, str) else c for c in content],
    }


def bash_use(r: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": f"toolu_bash{r:04d}", "name": "Bash", "input": {}}],
    }


def result(tool_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def output(r: int) -> str:
    return "\n".join(expected_line(r, n) for n in range(1, output_lines(r) + 1))


OFFLOADED = "\n\n[compactd: offloaded; only the start is shown. The whole text is 6,900 tokens, 260 lines: read_file ref=f_0123456789abcdef (line ranges) or grep ref=f_0123456789abcdef pattern=...]"

CASES = {
    "a valid request": ([], body(user("hi"))),
    "Claude Code's role: system message": ([], body(user("hi"), {"role": "system", "content": "env"})),
    "over the window": (["over the 2000-token window"], body(user("word " * 2_000))),
    "five cache breakpoints": (
        ["5 cache_control breakpoints"],
        body(
            user(
                *[{"type": "text", "text": f"t{i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
            )
        ),
    ),
    "an unanswered tool_use": (["has no tool_result"], body(user("hi"), bash_use(1))),
    "the client's own compaction": (
        ["compaction request of the client's own"],
        body(user("hi", {"type": "text", "text": "Respond with plain text only — an <analysis> block"})),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_request_failures_name_what_is_wrong(name: str) -> None:
    """Each broken request is reported with what is wrong with it; a valid one with nothing."""
    expected, request = CASES[name]
    failures = request_failures(request, context_window=2_000)
    assert len(failures) == len(expected), failures
    for want, got in zip(expected, failures, strict=True):
        assert want in got


def test_the_bash_command_prints_the_lines_the_read_check_expects() -> None:
    """seq's format prints the numbered lines expected_line names (the read check depends on it)."""
    assert bash_command(3).startswith("seq -f '") and bash_command(3).endswith(f" 1 {output_lines(3)}")
    assert expected_line(7, 12).startswith("round 007 line 0012: ")


def test_the_stand_in_plays_rounds_then_reads_an_offloaded_output_then_finishes() -> None:
    """Round 1 first, its thinking first (signed on the request); after the read-due round it calls
    read_file on the offloaded output; a right result passes, a wrong one is a failure; after the
    last round it answers with text."""
    up = ClaudeUpstream(rounds=4, context_window=100_000, read_every=3)
    turn, seen = up.plan(body(user("go")))
    assert [b["type"] for b in turn.content] == ["thinking", "text", "tool_use"]
    assert turn.content[2]["id"] == "toolu_bash0001" and turn.content[0]["signature"]
    assert seen.kind == "main" and seen.round == 0
    preview = "\n".join(output(3).splitlines()[:5]) + OFFLOADED
    history = [user("go"), bash_use(3), user(result("toolu_bash0003", preview))]
    turn, _ = up.plan(body(*history))
    call = turn.content[-1]
    assert call["name"] == "read_file" and call["input"] == {
        "ref": "f_0123456789abcdef",
        "start_line": 251,
        "end_line": 260,
    }
    read_back = {"role": "assistant", "content": turn.content}
    lines = "\n".join(output(3).splitlines()[250:260])
    turn, _ = up.plan(body(*history, read_back, user(result(call["id"], lines))))
    assert up.reads[0].ok and up.failures == []
    assert turn.content[-1]["id"] == "toolu_bash0004"
    turn, _ = up.plan(body(user("go"), bash_use(4), user(result("toolu_bash0004", output(4)))))
    assert turn.stop_reason == "end_turn" and "All 4 rounds ran." in turn.content[-1]["text"]
    up.plan(body(*history, read_back, user(result(call["id"], "nothing like it"))))
    assert up.reads[0].ok is False and "read_file f_0123456789abcdef" in up.failures[0]


def test_a_streamed_reply_is_the_real_api_s_event_sequence_and_reassembles() -> None:
    """message_start, ping, block start/delta/stop per block, message_delta, message_stop; the deltas rebuild the blocks."""
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
        "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 40},
        "content": [{"type": "text", "text": "Round 2, with a longer text."}, {"type": "tool_use", "id": "toolu_bash0002", "name": "Bash", "input": {"command": bash_command(2)}}],
    }  # fmt: skip
    events = list(stream_events(message))
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    text = "".join(
        e["delta"].get("text", "") for n, e in events if n == "content_block_delta" and e["index"] == 0
    )
    tool = "".join(
        e["delta"].get("partial_json", "")
        for n, e in events
        if n == "content_block_delta" and e["index"] == 1
    )
    assert text == message["content"][0]["text"] and json.loads(tool) == message["content"][1]["input"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_the_real_sdk_reads_its_stream_and_an_over_window_request_is_refused_as_the_api_does() -> None:
    """The anthropic SDK assembles the stand-in's streamed tool call; a request over the window gets
    400 "prompt is too long" and is recorded as a failure."""
    with ClaudeUpstream(rounds=2, context_window=3_000) as up:
        client = anthropic.Anthropic(api_key="test", base_url=up.base_url, max_retries=0)
        request = body(user("go"))
        with client.messages.stream(**request) as stream:
            message = stream.get_final_message()
        assert message.stop_reason == "tool_use" and message.content[-1].type == "tool_use"
        assert message.content[-1].input == {"command": bash_command(1), "description": "Round 1 checks"}
        with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
            client.messages.create(**body(user("word " * 3_000)))
        client.close()
    assert len(up.failures) == 1 and "over the 3000-token window" in up.failures[0]


def test_the_stand_in_refuses_thinking_on_a_changed_prefix_as_the_api_does() -> None:
    """A reply's thinking sent back on the prefix it answered passes; on an edited one it is the
    documented 400 (counted in `refused`), or dropped and listed with drop_block."""
    up = ClaudeUpstream(rounds=4, context_window=100_000).start()
    try:
        first = body(user("go"))
        turn, _ = up.plan(first)
        reply = {"role": "assistant", "content": turn.content}
        results = user(result("toolu_bash0001", output(1)))

        def send(b: dict[str, Any], beta: str = "") -> tuple[int, dict[str, Any]]:
            headers = {"content-type": "application/json", **({"anthropic-beta": beta} if beta else {})}
            r = httpx.post(f"{up.base_url}/v1/messages", content=json.dumps(b), headers=headers, timeout=10)
            return r.status_code, r.json()

        assert send({**first, "messages": [*first["messages"], reply, results]})[0] == 200
        edited = {**first, "messages": [user("go, please"), reply, results]}
        status, refused = send(edited)
        assert status == 400 and "bound to a different conversation" in refused["error"]["message"]
        assert len(up.refused) == 1
        thinking = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
        status, answered = send({**edited, "thinking": thinking}, beta="thinking-binding-controls-2026-08-01")
        assert status == 200 and answered["input_transformations"][0]["path"] == "messages.1.content.0"
    finally:
        up.stop()
