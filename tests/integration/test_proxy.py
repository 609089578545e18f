"""POST /v1/messages end to end: the anthropic SDK, only base_url changed, through compactd to a fake upstream."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.fakes.messages_api import reply, tool_call
from tests.integration.proxy_service import PROVIDER_KEY, Proxy, proxy

pytestmark = [pytest.mark.services]
__all__ = ["proxy"]

BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def _session(p: Proxy, sid: str) -> dict[str, Any]:
    with httpx.Client(base_url=p.url, headers={"Authorization": f"Bearer {p.key}"}) as c:
        return c.get(f"/v1/sessions/{sid}").json()


def _turns(p: Proxy, sid: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=p.url, headers={"Authorization": f"Bearer {p.key}"}) as c:
        prompt = c.get(f"/v1/sessions/{sid}/prompt").json()
    return prompt["messages"]


def test_non_streaming_and_streaming_replies_are_relayed_and_stored(proxy: Proxy) -> None:
    """A tool-using conversation through the endpoint: the SDK gets the upstream's answers, streamed
    and not, the upstream gets compactd's prompt and tools, and the session holds every turn."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(
        tool_call("bash", {"command": "ls"}, tool_id="toolu_p1", text="Looking."),
        reply("Two files."),
    )
    client = proxy.client(default_headers={"x-compactd-session": sid})
    try:
        first = client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=1024,
            system="You are a coding agent.",
            tools=[BASH],
            messages=[{"role": "user", "content": "How many files?"}],
        )
        assert first.stop_reason == "tool_use"
        history = [
            {"role": "user", "content": "How many files?"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_p1", "content": "a b"}],
            },
        ]
        with client.messages.stream(
            model="claude-sonnet-4-6",
            max_tokens=1024,
            system="You are a coding agent.",
            tools=[BASH],
            messages=history,
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    finally:
        client.close()
    assert text == "Two files." and final.stop_reason == "end_turn"
    sent = proxy.upstream.requests[-2:]
    assert [t["name"] for t in sent[0].body["tools"]] == [
        "bash",
        "read_file",
        "grep",
        "update_working_memory",
    ]
    assert "[compactd status]" in str(sent[1].body["messages"])
    assert sent[1].headers["x-api-key"] == PROVIDER_KEY
    messages = _turns(proxy, sid)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert _session(proxy, sid)["version"] == 4
