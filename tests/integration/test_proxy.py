"""POST /v1/messages end to end: the anthropic SDK, only base_url changed, through compactd to a fake upstream."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
import redis
from sqlalchemy import create_engine, text

from tests.conftest import REPO
from tests.fakes.messages_api import drop, error, reply, slow, stream_error, tool_call
from tests.integration.conftest import settings_env, wait_for
from tests.integration.proxy_service import PROVIDER_KEY, Proxy, proxy

pytestmark = [pytest.mark.services]
__all__ = ["proxy"]

MODEL = "claude-sonnet-4-6"
BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


@pytest.fixture(autouse=True)
def _fresh_upstream(proxy: Proxy) -> Iterator[None]:
    proxy.upstream.reset()
    yield


def _api(p: Proxy) -> httpx.Client:
    return httpx.Client(base_url=p.url, headers={"Authorization": f"Bearer {p.key}"})


def _session(p: Proxy, sid: str) -> dict[str, Any]:
    with _api(p) as c:
        r = c.get(f"/v1/sessions/{sid}")
    assert r.status_code == 200, (sid, r.text)
    return r.json()


def _version(p: Proxy, sid: str, expected: int) -> None:
    """The session reaches `expected` turns (a reply is recorded just after its response ends), and stays."""
    wait_for(lambda: _session(p, sid)["version"] == expected, timeout=10)
    time.sleep(0.3)
    assert _session(p, sid)["version"] == expected


def _sessions(p: Proxy, prefix: str) -> dict[str, int]:
    with _api(p) as c:
        page = c.get("/v1/sessions", params={"limit": 200}).json()
    return {s["id"]: s["turns"] for s in page["sessions"] if s["id"].startswith(prefix)}


def _sdk(p: Proxy, sid: str | None = None, **kwargs: Any) -> anthropic.Anthropic:
    headers = {"x-compactd-session": sid} if sid else {}
    return p.client(default_headers=headers, **kwargs)


def _ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    return client.messages.create(
        model=MODEL,
        max_tokens=1024,
        system="You are a coding agent.",
        tools=[BASH],
        messages=messages,
        **kwargs,
    )


def _content(message: Any) -> list[dict[str, Any]]:
    return [b.model_dump(exclude_none=True) for b in message.content]


def test_non_streaming_and_streaming_replies_are_relayed_and_stored(proxy: Proxy) -> None:
    """A tool-using conversation through the endpoint: the SDK gets the upstream's answers, streamed
    and not, the upstream gets compactd's prompt and tools with the provider key compactd holds,
    and the session holds every turn."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(
        tool_call("bash", {"command": "ls"}, tool_id="toolu_p1", text="Looking.", thinking="I should list."),
        reply("Two files."),
    )
    with _sdk(proxy, sid) as client:
        first = _ask(client, [{"role": "user", "content": "How many files?"}])
        assert first.stop_reason == "tool_use"
        history = [
            {"role": "user", "content": "How many files?"},
            {"role": "assistant", "content": _content(first)},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_p1", "content": "a b"}],
            },
        ]
        with client.messages.stream(
            model=MODEL, max_tokens=1024, system="You are a coding agent.", tools=[BASH], messages=history
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text == "Two files." and final.stop_reason == "end_turn"
    sent = proxy.upstream.requests
    assert [t["name"] for t in sent[0].body["tools"]] == [
        "bash",
        "read_file",
        "grep",
        "update_working_memory",
    ]
    assert "cache_control" in sent[1].body["messages"][-1]["content"][-1]  # compactd's breakpoint
    assert sent[1].headers["x-api-key"] == PROVIDER_KEY
    # the thinking block went back upstream with its signature intact
    thinking = [b for m in sent[1].body["messages"] for b in m["content"] if b.get("type") == "thinking"]
    assert thinking and thinking[0]["signature"] == _content(first)[0]["signature"]
    _version(proxy, sid, 4)


def test_a_failed_call_retried_stores_the_history_once(proxy: Proxy) -> None:
    """The upstream's 529 reaches the SDK unchanged; its retry of the same request stores nothing
    twice: the session holds the question once and the one answer."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(error(529), reply("Fine."))
    question = [{"role": "user", "content": "Is the build green?"}]
    with _sdk(proxy, sid) as client:
        with pytest.raises(anthropic.APIStatusError) as failed:
            _ask(client, question)
        assert failed.value.status_code == 529
        assert failed.value.body["error"]["type"] == "overloaded_error"
        assert _ask(client, question).content[0].text == "Fine."
    _version(proxy, sid, 2)
    assert len(proxy.upstream.requests) == 2
    # the same question both times, nothing added to it
    asked = [r.body["messages"][0]["content"][0]["text"] for r in proxy.upstream.requests]
    assert asked == ["Is the build green?"] * 2 and len(proxy.upstream.requests[1].body["messages"]) == 1


def _prompt_cached(p: Proxy, sid: str) -> int:
    """Wait until the worker has published the session's prompt entry in Redis; the session's pk."""
    engine = create_engine(p.settings.database_url)
    try:
        with engine.connect() as conn:
            pk = conn.execute(text("SELECT id FROM sessions WHERE client_id = :sid"), {"sid": sid}).scalar()
    finally:
        engine.dispose()
    client = redis.Redis.from_url(p.settings.redis_url)
    try:
        wait_for(lambda: client.exists(f"{p.settings.redis_prefix}prompt:{pk}"), timeout=20)
    finally:
        client.close()
    return int(pk)


def test_a_request_with_a_new_system_prompt_is_stored_before_it_is_sent(proxy: Proxy) -> None:
    """A request that extends the remembered conversation, whose prompt is cached, but with another
    system prompt (the budget counts it) is not sent ahead of its commit: it is stored the ordinary
    way first, then sent once, and the session holds each message once."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(reply("First."), reply("Second."))
    history: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    with _sdk(proxy, sid) as client:
        first = _ask(client, history)
        history += [{"role": "assistant", "content": _content(first)}, {"role": "user", "content": "more"}]
        _version(proxy, sid, 2)  # the reply recorded (its grace over), the worker's job sent
        _prompt_cached(proxy, sid)  # what the next request would be served from
        answer = client.messages.create(
            model=MODEL, max_tokens=1024, system="You are a careful agent.", tools=[BASH], messages=history
        )
    assert answer.content[0].text == "Second."
    _version(proxy, sid, 4)
    assert len(proxy.upstream.requests) == 2  # each request sent once
    assert "proxy.ahead_failed" not in proxy.api_log.read_text()  # not sent before its commit
    assert proxy.upstream.requests[-1].body["system"][0]["text"] == "You are a careful agent."


def test_an_error_reply_to_the_prefetched_entry_is_no_500(proxy: Proxy) -> None:
    """When Redis answers the entry read that rides in the key check with an error (here
    WRONGTYPE; LOADING after a restart looks the same), the request is served as if nothing was
    cached: the client gets its answer and the session its turns."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(reply("First."), reply("Second."))
    history: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    with _sdk(proxy, sid) as client:
        first = _ask(client, history)
        history += [{"role": "assistant", "content": _content(first)}, {"role": "user", "content": "more"}]
        _version(proxy, sid, 2)
        pk = _prompt_cached(proxy, sid)
        r = redis.Redis.from_url(proxy.settings.redis_url)
        try:
            key = f"{proxy.settings.redis_prefix}prompt:{pk}"
            r.delete(key)
            r.rpush(key, b"not a hash")  # HMGET on it is an error reply
            answer = _ask(client, history)
        finally:
            r.delete(key)
            r.close()
    assert answer.content[0].text == "Second."
    _version(proxy, sid, 4)


def test_the_sdk_retries_a_529_through_the_endpoint(proxy: Proxy) -> None:
    """With the SDK's own retries on, a 529 then a reply is one answer and one stored exchange."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(error(529, retry_after=0), error(429, retry_after=0), reply("Retried."))
    with _sdk(proxy, sid, max_retries=3) as client:
        answer = client.messages.create(
            model=MODEL, max_tokens=64, tools=[BASH], messages=[{"role": "user", "content": "go"}]
        )
    assert answer.content[0].text == "Retried."
    _version(proxy, sid, 2)


def test_a_truncated_history_continues_in_a_linked_new_session(proxy: Proxy) -> None:
    """A client that drops part of its history (its own compaction, /clear, an edit) never corrupts
    the session: the conversation continues in a new session linked to the old one."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(reply("one"), reply("two"), reply("three"))
    u1, u2 = {"role": "user", "content": "first"}, {"role": "user", "content": "second"}
    with _sdk(proxy, sid) as client:
        a1 = {"role": "assistant", "content": _content(_ask(client, [u1]))}
        _ask(client, [u1, a1, u2])
        _version(proxy, sid, 4)
        _ask(client, [u1, a1, {"role": "user", "content": "second, said differently"}])
    branches = [s for s in _sessions(proxy, sid) if s != sid]
    assert len(branches) == 1
    _version(proxy, branches[0], 4)  # the client's 3 messages and the reply
    assert _session(proxy, branches[0])["parent_session_id"] == sid
    _version(proxy, sid, 4)  # the old session is untouched
    assert "proxy.diverged" in proxy.api_log.read_text()
    with httpx.Client(base_url=proxy.url) as c:
        metrics = c.get("/metrics").text
    (line,) = [m for m in metrics.splitlines() if m.startswith("compactd_proxy_diverged_total")]
    assert float(line.split()[-1]) >= 1


def test_a_history_read_from_its_new_part_is_stored_as_sent(proxy: Proxy) -> None:
    """From its second request on, a history's known part is not parsed again (the answer's log line
    counts the messages taken from the memo), and what is stored is what the client sent: grown in
    place, and an edit behind the newest known message continuing in a linked new session."""
    sid = f"k-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(reply("one"), reply("two"), reply("three"), reply("four"))
    u1, u2, u3 = ({"role": "user", "content": f"step {i} " + "é" * 50} for i in range(3))
    with _sdk(proxy, sid) as client:
        a1 = {"role": "assistant", "content": _content(_ask(client, [u1]))}
        a2 = {"role": "assistant", "content": _content(_ask(client, [u1, a1, u2]))}
        _version(proxy, sid, 4)
        _ask(client, [u1, a1, u2, a2, u3])
        _version(proxy, sid, 6)
        _ask(client, [u1, a1, {"role": "user", "content": "step 1, said differently"}])
    (branch,) = [s for s in _sessions(proxy, sid) if s != sid]
    _version(proxy, branch, 4)
    assert _session(proxy, branch)["parent_session_id"] == sid
    _version(proxy, sid, 6)
    answered = [
        json.loads(line) for line in proxy.api_log.read_text().splitlines() if '"proxy.answered"' in line
    ]
    known = [e["known_messages"] for e in answered if e.get("session_id") in (sid, branch)]
    assert known == [0, 1, 3, 2]
    with _api(proxy) as c:
        stored = json.dumps(c.get(f"/v1/sessions/{branch}/prompt").json()["messages"], ensure_ascii=False)
    assert "said differently" in stored and "step 0 " + "é" * 50 in stored


def test_two_conversations_under_one_client_session_at_once(proxy: Proxy) -> None:
    """Claude Code's main conversation and a sub-agent, streaming at the same time under one client
    session id, become two sessions, each with its own turns."""
    client_session = str(uuid.uuid4())
    metadata = {"user_id": json.dumps({"device_id": "d" * 16, "session_id": client_session})}
    proxy.upstream.script(*[slow("working on it " * 3, delay_seconds=0.02) for _ in range(4)])
    errors: list[BaseException] = []

    def run(task: str) -> None:
        try:
            with proxy.client() as client:
                history: list[dict[str, Any]] = [{"role": "user", "content": task}]
                for follow_up in ("and then?", "thanks"):
                    with client.messages.stream(
                        model=MODEL, max_tokens=64, tools=[BASH], messages=history, metadata=metadata
                    ) as stream:
                        final = stream.get_final_message()
                    history += [
                        {"role": "assistant", "content": _content(final)},
                        {"role": "user", "content": follow_up},
                    ]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(task,)) for task in ("fix the parser", "search for TODOs")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # each last reply is recorded once its grace is over (no next request came for it)
    wait_for(lambda: sorted(_sessions(proxy, f"cc-{client_session}-").values()) == [4, 4], timeout=10)
    sessions = _sessions(proxy, f"cc-{client_session}-")
    assert sorted(sessions.values()) == [4, 4], sessions


def test_a_sub_agent_is_linked_to_the_main_conversation(proxy: Proxy) -> None:
    """Under one client session, the conversation that started first is the main one; each later
    one (a sub-agent) is its own session, linked to the main one's (parent_session_id); another
    client session's conversations are not linked to it."""
    client_session, other = str(uuid.uuid4()), str(uuid.uuid4())
    proxy.upstream.script(*[reply("ok") for _ in range(4)])

    def start(session: str, task: str) -> None:
        metadata = {"user_id": json.dumps({"device_id": "d" * 16, "session_id": session})}
        with proxy.client() as client:
            client.messages.create(
                model=MODEL,
                max_tokens=64,
                tools=[BASH],
                messages=[{"role": "user", "content": task}],
                metadata=metadata,
            )

    start(client_session, "fix the parser")
    (main,) = _sessions(proxy, f"cc-{client_session}-")
    start(client_session, "search the repository for TODOs and report them")
    start(other, "fix the parser")
    sub = next(s for s in _sessions(proxy, f"cc-{client_session}-") if s != main)
    (alone,) = _sessions(proxy, f"cc-{other}-")
    assert _session(proxy, main)["parent_session_id"] is None
    assert _session(proxy, sub)["parent_session_id"] == main
    assert _session(proxy, alone)["parent_session_id"] is None


def test_an_upstream_error_mid_stream_reaches_the_client(proxy: Proxy) -> None:
    """An overloaded_error event in the stream is passed on; nothing of the reply is stored."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(stream_error())
    with (
        _sdk(proxy, sid) as client,
        pytest.raises(anthropic.APIStatusError) as failed,
        client.messages.stream(
            model=MODEL, max_tokens=64, tools=[BASH], messages=[{"role": "user", "content": "hi"}]
        ) as s,
    ):
        s.get_final_message()
    assert "overloaded" in str(failed.value).lower()
    _version(proxy, sid, 1)


def test_an_upstream_that_drops_the_connection_is_a_502(proxy: Proxy) -> None:
    """An upstream that closes without answering is an Anthropic-shaped 502 (the SDK may retry it)."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(drop())
    with _sdk(proxy, sid) as client, pytest.raises(anthropic.APIStatusError) as failed:
        _ask(client, [{"role": "user", "content": "hello?"}])
    assert failed.value.status_code == 502 and failed.value.body["error"]["type"] == "api_error"
    _version(proxy, sid, 1)


def test_a_client_disconnect_cancels_the_upstream_call(proxy: Proxy) -> None:
    """The client going away mid-stream closes the upstream call long before it would have ended,
    and no partial reply is stored."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(slow("x" * 16 * 200, delay_seconds=0.05))  # ~10 s if read to the end
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "stream": True,
        "tools": [BASH],
        "messages": [{"role": "user", "content": "long"}],
    }
    headers = {"x-api-key": proxy.key, "x-compactd-session": sid, "anthropic-version": "2023-06-01"}
    started = time.monotonic()
    with (
        httpx.Client(base_url=proxy.url) as c,
        c.stream("POST", "/v1/messages", json=body, headers=headers) as r,
    ):
        assert r.status_code == 200
        got = b""
        for chunk in r.iter_raw():
            got += chunk
            if got.count(b"content_block_delta") >= 3:
                break
    wait_for(lambda: proxy.upstream.disconnects == 1, timeout=5)
    assert time.monotonic() - started < 5
    assert proxy.upstream.completed == 0
    _version(proxy, sid, 1)


def test_a_client_disconnect_cancels_a_non_streaming_call(proxy: Proxy) -> None:
    """A non-streaming request (compactd streams it from the upstream and answers it whole): the
    client giving up before the answer closes the upstream call at once, and nothing of the reply
    is stored."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(slow("x" * 16 * 200, delay_seconds=0.05))  # ~10 s if read to the end
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "tools": [BASH],
        "messages": [{"role": "user", "content": "long"}],
    }
    headers = {"x-api-key": proxy.key, "x-compactd-session": sid, "anthropic-version": "2023-06-01"}
    started = time.monotonic()
    with (
        httpx.Client(base_url=proxy.url, timeout=httpx.Timeout(5, read=1.0)) as c,
        pytest.raises(httpx.ReadTimeout),
    ):
        c.post("/v1/messages", json=body, headers=headers)
    wait_for(lambda: proxy.upstream.disconnects == 1, timeout=5)
    assert time.monotonic() - started < 5
    assert proxy.upstream.completed == 0
    _version(proxy, sid, 1)


def test_count_tokens_counts_what_compactd_would_send(proxy: Proxy) -> None:
    """count_tokens of a known conversation is asked of the upstream with compactd's prompt (its memory
    block included) plus the new message, and nothing is stored."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(reply("ok"))
    history: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    with _sdk(proxy, sid) as client:
        history += [
            {"role": "assistant", "content": _content(_ask(client, history))},
            {"role": "user", "content": "more"},
        ]
        counted = client.messages.count_tokens(
            model=MODEL, system="You are a coding agent.", tools=[BASH], messages=history
        )
    assert counted.input_tokens > 0
    sent = proxy.upstream.requests[-1]
    assert sent.path.startswith("/v1/messages/count_tokens")
    # compactd's served messages (its cache breakpoints on them), then the message not stored yet
    assert sent.body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert sent.body["messages"][-1]["content"][-1]["text"] == "more"
    assert "stream" not in sent.body and "max_tokens" not in sent.body
    _version(proxy, sid, 2)


def test_compactds_read_file_is_answered_inside_the_call(proxy: Proxy) -> None:
    """The model reads an offloaded output back with read_file: compactd answers it and continues the
    call, the client sees one message without that tool, and its next request reconciles."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    big = "\n".join(f"line {i}: value_{i * 7}" for i in range(400))
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "run the tests"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_t1", "name": "bash", "input": {"command": "pytest"}}
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_t1", "content": big}]},
    ]
    proxy.upstream.script(reply("noted"))
    with _sdk(proxy, sid) as client:
        history += [{"role": "assistant", "content": _content(_ask(client, history))}]
        with _api(proxy) as c:
            (ref,) = [
                f["ref"] for f in c.get(f"/v1/sessions/{sid}/files").json()["files"] if f["kind"] == "offload"
            ]
        proxy.upstream.script(
            tool_call(
                "read_file", {"ref": ref, "start_line": 2, "end_line": 3}, tool_id="toolu_rf", text="Reading."
            ),
            reply("Line 2 says value_7."),
        )
        history.append({"role": "user", "content": "what does line 2 say?"})
        with client.messages.stream(
            model=MODEL, max_tokens=256, system="You are a coding agent.", tools=[BASH], messages=history
        ) as s:
            seen = s.get_final_message()
        assert [b.type for b in seen.content] == ["text", "text"]
        assert "".join(b.text for b in seen.content) == "Reading.Line 2 says value_7."
        assert seen.stop_reason == "end_turn"
        continued = proxy.upstream.requests[-1].body["messages"]
        (result,) = [b for b in continued[-1]["content"] if b.get("type") == "tool_result"]
        assert result["tool_use_id"] == "toolu_rf" and "line 2: value_14" in result["content"]
        version = 8  # 5 + the model's read, compactd's answer, the final message
        _version(proxy, sid, version)
        proxy.upstream.script(reply("bye"))
        history += [{"role": "assistant", "content": _content(seen)}, {"role": "user", "content": "thanks"}]
        _ask(client, history)
    _version(proxy, sid, version + 2)
    assert not [s for s in _sessions(proxy, sid) if s != sid]  # no divergence


def test_side_requests_are_passed_through_untouched(proxy: Proxy) -> None:
    """A one-message request without tools (a title, a quota probe) goes upstream as the client sent it
    and creates no session."""
    before = _sessions(proxy, "")
    proxy.upstream.script(reply("A title"))
    with proxy.client() as client:
        answer = client.messages.create(
            model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "Title this chat"}]
        )
    assert answer.content[0].text == "A title"
    assert proxy.upstream.requests[-1].body["messages"] == [{"role": "user", "content": "Title this chat"}]
    assert _sessions(proxy, "") == before


def test_the_provider_key_can_travel_with_the_request(proxy: Proxy) -> None:
    """With x-compactd-key the client's own key goes upstream untouched."""
    own = "sk-ant-api03-" + "Cl1" * 30 + "QQ"
    proxy.upstream.script(reply("ok"))
    client = anthropic.Anthropic(
        base_url=proxy.url, api_key=own, max_retries=0, default_headers={"x-compactd-key": proxy.key}
    )
    with client:
        _ask(client, [{"role": "user", "content": "custom header mode"}])
    sent = proxy.upstream.requests[-1].headers
    # this SDK version sends its key as Authorization: Bearer; either way it arrives as sent
    assert sent.get("x-api-key") == own or sent.get("authorization") == f"Bearer {own}"


@pytest.mark.parametrize(
    ("headers", "status", "kind"),
    [
        ({}, 401, "authentication_error"),
        ({"x-api-key": "cpd_wrong"}, 401, "authentication_error"),
        ({"x-compactd-session": "bad id!"}, 400, "invalid_request_error"),
    ],
)
def test_compactds_own_errors_are_in_the_anthropic_shape(
    proxy: Proxy, headers: dict[str, str], status: int, kind: str
) -> None:
    """A bad key or header is answered as the Messages API answers errors, not as problem+json."""
    sent = (
        {"x-api-key": proxy.key, **headers}
        if "x-api-key" in headers or "x-compactd-session" in headers
        else headers
    )
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    with httpx.Client(base_url=proxy.url) as c:
        r = c.post("/v1/messages?beta=true", json=body, headers=sent)
        bad = c.post(
            "/v1/messages",
            content=b"{not json",
            headers={"x-api-key": proxy.key, "content-type": "application/json"},
        )
    assert r.status_code == status and r.json()["type"] == "error" and r.json()["error"]["type"] == kind
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"


TENANT_PROVIDER_KEY = "sk-ant-api03-" + "Tn7" * 30 + "ZZ"  # the key compactd holds for one tenant


def test_a_tenant_holds_its_own_provider_key(proxy: Proxy) -> None:
    """Set with the CLI (from stdin) or the API, the tenant's own provider key goes upstream instead
    of the deployment's (at once on the API that set it; within 10 s on the others); the database
    holds it sealed; cleared, the deployment's key applies again."""
    tenant = proxy.settings.default_tenant
    try:
        done = subprocess.run(
            [sys.executable, "-m", "api.cli.command", "tenant", "provider-key", tenant],
            input=TENANT_PROVIDER_KEY + "\n",
            env=settings_env(proxy.settings),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert TENANT_PROVIDER_KEY not in done.stdout + done.stderr
        kid = re.search(r"provider key ([0-9a-f]{12}) held", done.stdout)
        assert kid, done.stdout
        with _api(proxy) as c:
            assert c.get("/v1/provider-key").json() == {"key_id": kid.group(1)}
            # the API process's cache may predate the CLI's change: the API's own PUT is seen at once
            put = c.put("/v1/provider-key", json={"api_key": TENANT_PROVIDER_KEY})
            assert put.json() == {"key_id": kid.group(1)}
            assert c.put("/v1/provider-key", json={"api_key": "has space"}).status_code == 422
        proxy.upstream.script(reply("ok"), reply("ok"))
        with proxy.client() as client:
            _ask(client, [{"role": "user", "content": "billed to the tenant"}])
        assert proxy.upstream.requests[-1].headers.get("x-api-key") == TENANT_PROVIDER_KEY
        engine = create_engine(proxy.settings.database_url)
        with engine.connect() as conn:
            (sealed,) = conn.execute(text("SELECT sealed FROM provider_keys")).one()
        engine.dispose()
        # no run of the key's text (one "Tn7" alone turns up in random base64 about once in 1,500 seals)
        assert sealed.startswith("v2:") and "Tn7" * 3 not in sealed
    finally:
        with _api(proxy) as c:
            assert c.delete("/v1/provider-key").status_code == 204
            assert c.get("/v1/provider-key").json() == {"key_id": None}
    with proxy.client() as client:
        _ask(client, [{"role": "user", "content": "billed to the deployment"}])
    assert proxy.upstream.requests[-1].headers.get("x-api-key") == PROVIDER_KEY


def test_no_provider_key_is_logged_or_stored(proxy: Proxy) -> None:
    """After every test above, neither provider key is in a log line, a database row or a Redis value."""
    own = "sk-ant-api03-" + "Cl1" * 30 + "QQ"
    proxy.upstream.script(reply("ok"))
    client = anthropic.Anthropic(
        base_url=proxy.url, api_key=own, max_retries=0, default_headers={"x-compactd-key": proxy.key}
    )
    with client:
        _ask(client, [{"role": "user", "content": "one more, for the record"}])
    logs = proxy.api_log.read_text() + (proxy.api_log.parent / "worker.log").read_text()
    engine = create_engine(proxy.settings.database_url)
    with engine.connect() as conn:
        tables = [r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))]
        rows = "".join(str(list(conn.execute(text(f"SELECT * FROM {t}")))) for t in tables)
    engine.dispose()
    client_redis = redis.Redis.from_url(proxy.settings.redis_url)
    values = b""
    for key in client_redis.scan_iter(f"{proxy.settings.redis_prefix}*"):
        kind = client_redis.type(key)
        if kind == b"string":
            values += client_redis.get(key) or b""
        elif kind == b"hash":
            values += b"".join(client_redis.hgetall(key).values())
        elif kind == b"list":
            values += b"".join(client_redis.lrange(key, 0, -1))
    client_redis.close()
    assert rows and logs
    for secret in (PROVIDER_KEY, own, TENANT_PROVIDER_KEY):
        assert secret not in logs and secret[:24] not in logs
        assert secret not in rows
        assert secret.encode() not in values


def test_the_docs_example_agent_runs_through_compactd(proxy: Proxy, tmp_path: Path) -> None:
    """docs/proxy.md's plain anthropic-SDK agent (no compactd code, only ANTHROPIC_BASE_URL and the
    key changed) runs as is in its own process through compactd: its bash call really runs, the model
    is given compactd's prompt and tools, and the conversation is a session of its own."""
    text = (REPO / "docs" / "proxy.md").read_text()
    found = re.search(re.escape("<!-- proxy-example-agent -->") + r"\s*```python\n(.*?)```", text, re.S)
    assert found, "docs/proxy.md has no python block after its example-agent marker"
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a.py", "b.py", "notes.txt"):
        (work / name).write_text("x\n")
    script = tmp_path / "agent.py"
    script.write_text(found.group(1))
    proxy.upstream.script(
        tool_call("bash", {"command": "ls *.py | wc -l"}, tool_id="toolu_ex1", text="Let me look."),
        reply("There are 2 Python files."),
    )
    before = _sessions(proxy, "conv-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTD_", "ANTHROPIC_"))}
    env |= {"ANTHROPIC_BASE_URL": proxy.url, "ANTHROPIC_API_KEY": proxy.key}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "There are 2 Python files."
    bodies = proxy.upstream.bodies
    assert len(bodies) == 2 and "cache_control" in bodies[1]["messages"][-1]["content"][-1]
    (result,) = [b for b in bodies[1]["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert result["tool_use_id"] == "toolu_ex1" and result["content"].strip() == "2"
    assert [t["name"] for t in bodies[1]["tools"]] == ["bash", "read_file", "grep", "update_working_memory"]
    (new,) = set(_sessions(proxy, "conv-")) - set(before)
    _version(proxy, new, 4)


def test_a_session_fed_through_the_turns_api_is_not_adopted(proxy: Proxy) -> None:
    """Naming a session that holds turns the proxy did not store continues in a new session linked to it."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    with _api(proxy) as c:
        r = c.post(
            f"/v1/sessions/{sid}/turns",
            json={"messages": [{"role": "user", "content": "from the turns API"}]},
        )
        assert r.status_code == 200
    proxy.upstream.script(reply("ok"))
    with _sdk(proxy, sid) as client:
        _ask(client, [{"role": "user", "content": "through the proxy"}])
    (branch,) = [s for s in _sessions(proxy, sid) if s != sid]
    _version(proxy, branch, 2)
    assert _session(proxy, branch)["parent_session_id"] == sid
    _version(proxy, sid, 1)


def test_a_claude_code_shaped_conversation(proxy: Proxy) -> None:
    """Requests shaped as Claude Code sends them (?beta=true, beta flags, a billing block and its own
    breakpoints on system, tools and the newest message, thinking, context_management, metadata
    user_id) go upstream with those passed through, at most 4 breakpoints, in a cc- session; the
    next turn, its breakpoint moved, extends the same session."""
    client_session = str(uuid.uuid4())
    mark = {"type": "ephemeral"}
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328; cch=1"},
        {"type": "text", "text": "You are Claude Code.", "cache_control": mark},
        {"type": "text", "text": "Environment: linux.", "cache_control": mark},
    ]
    tools = [{**BASH, "name": "Bash"}, {**BASH, "name": "Read", "cache_control": mark}]
    base = {
        "model": MODEL,
        "max_tokens": 32000,
        "stream": True,
        "system": system,
        "tools": tools,
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": json.dumps({"device_id": "d" * 64, "session_id": client_session})},
    }
    headers = {
        "x-api-key": proxy.key,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
        "x-app": "cli",
    }
    u1 = {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "fix it", "cache_control": mark},
        ],
    }
    proxy.upstream.script(
        tool_call("Bash", {"command": "pytest"}, tool_id="toolu_cc1", thinking="Run the tests first."),
        reply("Fixed."),
    )
    with httpx.Client(base_url=proxy.url, timeout=30) as c:
        first = c.post("/v1/messages?beta=true", json={**base, "messages": [u1]}, headers=headers)
        assert first.status_code == 200, first.text
        events = [json.loads(line[5:]) for line in first.text.splitlines() if line.startswith("data:")]
        blocks: dict[int, dict[str, Any]] = {}
        for e in events:
            if e["type"] == "content_block_start":
                blocks[e["index"]] = dict(e["content_block"])
            elif e["type"] == "content_block_delta":
                d, b = e["delta"], blocks[e["index"]]
                if d["type"] == "thinking_delta":
                    b["thinking"] = b.get("thinking", "") + d["thinking"]
                elif d["type"] == "signature_delta":
                    b["signature"] = d["signature"]
                elif d["type"] == "input_json_delta":
                    b["_json"] = b.get("_json", "") + d["partial_json"]
        for b in blocks.values():
            if "_json" in b:
                b["input"] = json.loads(b.pop("_json"))
        assistant = {"role": "assistant", "content": [blocks[i] for i in sorted(blocks)]}
        u1_moved = {"role": "user", "content": [u1["content"][0], {"type": "text", "text": "fix it"}]}
        result = {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_cc1",
                    "content": "1 passed",
                    "cache_control": mark,
                }
            ],
        }
        second = c.post(
            "/v1/messages?beta=true",
            json={**base, "messages": [u1_moved, assistant, result]},
            headers=headers,
        )
        assert second.status_code == 200 and "Fixed." in second.text
    sent = proxy.upstream.requests
    assert all(r.path == "/v1/messages?beta=true" for r in sent)
    assert (
        sent[1].headers["anthropic-beta"] == headers["anthropic-beta"] and sent[1].headers["x-app"] == "cli"
    )
    body = sent[1].body
    assert body["thinking"] == base["thinking"] and body["context_management"] == base["context_management"]
    assert body["metadata"] == base["metadata"] and body["max_tokens"] == 32000
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header")
    assert json.dumps(body).count('"cache_control"') <= 4
    (sid,) = _sessions(proxy, f"cc-{client_session}-")
    _version(proxy, sid, 4)  # the task, the reply, the tool result, the answer: one session, no divergence


def test_a_message_thread_is_refused_as_unsupported_and_nothing_is_kept(proxy: Proxy) -> None:
    """A request on a message thread carries only its new messages: compactd answers it as a
    server without threads does (400, `error.details.error_code` thread_unsupported_request, the
    `capability_rejected:` token Claude Code matches), sends nothing upstream and stores nothing;
    the same turn resent whole, without `thread`, goes through and `thread` never reaches upstream."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    proxy.upstream.script(reply("Green."))
    question = [{"role": "user", "content": "Is the build green?"}]
    with _sdk(proxy, sid) as client:
        for thread in ({"type": "create"}, {"type": "continue", "id": "thr_01"}):
            with pytest.raises(anthropic.BadRequestError) as refused:
                _ask(client, question, extra_body={"thread": thread})
            error_ = refused.value.body["error"]
            assert error_["type"] == "invalid_request_error"
            assert error_["details"]["error_code"] == "thread_unsupported_request"
            assert error_["message"].startswith("capability_rejected: beta_header:message-threads-2026-08-12")
        assert proxy.upstream.requests == []
        assert _sessions(proxy, sid) == {}
        assert _ask(client, question).content[0].text == "Green."
    _version(proxy, sid, 2)
    assert ["thread" in r.body for r in proxy.upstream.requests] == [False]
