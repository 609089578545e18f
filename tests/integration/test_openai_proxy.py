"""The OpenAI drop-ins (POST /v1/responses, /v1/chat/completions) with the real openai SDK: only its
base_url and key changed, against a real compactd (API + worker) whose upstream is the OpenAI
stand-in (tests/fakes/openai_api.py: it checks tool pairing, the window and preserved reasoning)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import REPO
from tests.fakes.openai_api import OpenAIStandIn, error, reply
from tests.integration.conftest import settings_env, wait_for
from tests.integration.proxy_service import OPENAI_PROVIDER_KEY, Proxy, openai_proxy  # noqa: F401

pytestmark = pytest.mark.services

BASH = {
    "type": "function",
    "name": "bash",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
CHAT_BASH = {"type": "function", "function": {k: v for k, v in BASH.items() if k != "type"}}
# what a reasoning client that keeps nothing upstream sends (Codex does): its reasoning comes back
# with its encrypted content, to be sent again
STATELESS: dict[str, Any] = {
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "low"},
}


@pytest.fixture(autouse=True)
def _fresh(openai_proxy: Proxy) -> Iterator[None]:  # noqa: F811
    api = _upstream(openai_proxy)
    api._script.clear()
    api.requests.clear()
    api.failures.clear()
    api.dropped = 0
    yield


def _upstream(p: Proxy) -> OpenAIStandIn:
    assert p.openai is not None
    return p.openai


def _client(p: Proxy, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{p.url}/v1", api_key=p.key, max_retries=0, **kw)


def _session(p: Proxy, sid: str) -> dict[str, Any]:
    r = httpx.get(f"{p.url}/v1/sessions/{sid}", headers={"Authorization": f"Bearer {p.key}"})
    assert r.status_code == 200, r.text
    return r.json()


def _prompt(p: Proxy, sid: str) -> dict[str, Any]:
    """The session's served prompt (GET /prompt): its canonical messages."""
    r = httpx.get(f"{p.url}/v1/sessions/{sid}/prompt", headers={"Authorization": f"Bearer {p.key}"})
    assert r.status_code == 200, r.text
    return r.json()


def _responses_agent(p: Proxy, sid: str, rounds: int, stream: bool) -> list[Any]:
    """An example agent on the Responses API: it runs the model's bash calls until it answers."""
    with _client(p, default_headers={"x-compactd-session": sid}) as client:
        items: list[Any] = [
            {"role": "developer", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Count the Python files."},
        ]
        outputs = []
        for _ in range(rounds + 1):
            if stream:
                with client.responses.stream(model="gpt-5.5", input=items, tools=[BASH], **STATELESS) as s:
                    for _event in s:
                        pass
                    response = s.get_final_response()
            else:
                response = client.responses.create(model="gpt-5.5", input=items, tools=[BASH], **STATELESS)
            outputs.append(response)
            items += [o.model_dump(exclude_none=True) for o in response.output]
            calls = [o for o in response.output if o.type == "function_call"]
            if not calls:
                break
            for call in calls:
                command = json.loads(call.arguments)["command"]
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": call.call_id,
                        "output": f"ran {command}: 7 files",
                    }
                )
        return outputs


@pytest.mark.parametrize("stream", [False, True])
def test_an_sdk_agent_runs_through_the_responses_endpoint(openai_proxy: Proxy, stream: bool) -> None:  # noqa: F811
    """An openai-SDK agent loop (bash calls, their outputs) through /v1/responses: the upstream gets
    valid, append-only requests with compactd's tools beside the client's and the provider key
    compactd holds, every reasoning item on its own prefix; one session holds every turn."""
    api = _upstream(openai_proxy)
    api.script(
        reply(calls=[("bash", {"command": "ls"})]),
        reply("Let me look deeper.", calls=[("bash", {"command": "find . -name '*.py'"})]),
        reply("There are 7 Python files."),
    )
    sid = f"resp-agent-{int(stream)}"
    outputs = _responses_agent(openai_proxy, sid, rounds=3, stream=stream)
    assert outputs[-1].output_text == "There are 7 Python files."
    assert api.failures == [] and api.dropped == 0
    assert [r.reasoning_kept for r in api.requests] == [0, 1, 2]
    bodies = [r.body for r in api.requests]
    assert all(r.headers["authorization"] == f"Bearer {OPENAI_PROVIDER_KEY}" for r in api.requests)
    assert [t["name"] for t in bodies[0]["tools"]] == ["bash", "read_file", "grep", "update_working_memory"]
    assert all(b["stream"] is True for b in bodies)
    # append-only: each request's input starts with the one before it
    for before, after in itertools.pairwise(bodies):
        assert after["input"][: len(before["input"])] == before["input"]
    # the developer message is the system prompt; then task, call, output, call, output, answer
    wait_for(lambda: _session(openai_proxy, sid)["version"] == 6, timeout=10)
    prompt = _prompt(openai_proxy, sid)
    turns = prompt["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant"] * 3
    kinds = [[b["type"] for b in t["content"]] for t in turns]
    assert kinds[1] == ["redacted_thinking", "tool_use"] and kinds[2] == ["tool_result"]
    assert kinds[5] == ["redacted_thinking", "text"]
    assert prompt["system"][0]["text"] == "You are a careful coding agent."


def test_a_chat_completions_agent_runs_through_compactd(openai_proxy: Proxy) -> None:  # noqa: F811
    """An openai-SDK agent on /v1/chat/completions, streamed with usage and not: the client's tool
    calls come back, the upstream's requests pair every call with its result and only grow."""
    api = _upstream(openai_proxy)
    api.script(reply(calls=[("bash", {"command": "ls"})]), reply("Seven."))
    with _client(openai_proxy, default_headers={"x-compactd-session": "chat-agent"}) as client:
        messages: list[Any] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Count the Python files."},
        ]
        first = client.chat.completions.create(model="gpt-5.5", messages=messages, tools=[CHAT_BASH])
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "bash"
        messages += [first.choices[0].message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "7 files"}]
        chunks = list(
            client.chat.completions.create(
                model="gpt-5.5",
                messages=messages,
                tools=[CHAT_BASH],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Seven."
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
        assert api.failures == []
        bodies = [r.body for r in api.requests]
        assert bodies[1]["messages"][: len(bodies[0]["messages"])] == bodies[0]["messages"]
        assert bodies[0]["messages"][0] == {"role": "system", "content": "You are a careful coding agent."}


def test_compactds_own_tool_calls_are_answered_inside_the_call(openai_proxy: Proxy) -> None:  # noqa: F811
    """The upstream calls compactd's update_working_memory: compactd answers it and calls again; the
    client sees one response without that call, on both formats."""
    api = _upstream(openai_proxy)
    note = {"ops": [{"op": "set", "section": "notes", "key": "files", "value": "7 Python files"}]}
    api.script(
        reply(calls=[("update_working_memory", note)]),
        reply("Noted: seven."),
        reply(calls=[("update_working_memory", note)]),
        reply("Noted again."),
    )
    with _client(openai_proxy, default_headers={"x-compactd-session": "hidden-rounds"}) as client:
        r = client.responses.create(model="gpt-5.5", input="Count and remember.", tools=[BASH])
        assert r.output_text == "Noted: seven." and all(o.type != "function_call" for o in r.output)
        second = api.requests[1].body["input"]
        assert [i["type"] for i in second[-3:]] == ["reasoning", "function_call", "function_call_output"]
        assert "working memory updated" in second[-1]["output"]
        c = client.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": "Count and remember."}], tools=[CHAT_BASH]
        )
        assert c.choices[0].message.content == "Noted again." and not c.choices[0].message.tool_calls
        assert c.choices[0].finish_reason == "stop"
        assert api.failures == [] and api.dropped == 0


def test_errors_come_in_the_openai_sdks_own_shape(openai_proxy: Proxy) -> None:  # noqa: F811
    """A bad key, a bad body, the upstream's 429 and context_length_exceeded: each parsed by the
    SDK as its own exception class, with the message and code."""
    with (
        openai.OpenAI(base_url=f"{openai_proxy.url}/v1", api_key="cpd_wrong", max_retries=0) as wrong,
        pytest.raises(openai.AuthenticationError) as bad_key,
    ):
        wrong.responses.create(model="gpt-5.5", input="hi")
    assert "key" in bad_key.value.message
    with _client(openai_proxy) as client:
        with pytest.raises(openai.BadRequestError) as bad_body:
            client.responses.create(
                model="gpt-5.5",
                input=[{"type": "item_reference", "id": "x"}, {"role": "user", "content": "hi"}],
            )
        assert "item_reference" in bad_body.value.message
        api = _upstream(openai_proxy)
        api.script(error(429, "slow down"), error(400, "too long", code="context_length_exceeded"))
        history = [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "three"},
        ]
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="gpt-5.5", messages=history)
        assert "slow down" in limited.value.message
        with pytest.raises(openai.BadRequestError) as too_long:
            client.chat.completions.create(model="gpt-5.5", messages=history)
        assert too_long.value.code == "context_length_exceeded"


def test_models_pass_through_and_the_websocket_upgrade_is_refused_with_426(openai_proxy: Proxy) -> None:  # noqa: F811
    """GET /v1/models comes from the upstream; a WebSocket upgrade on /v1/responses gets a 426, the
    answer on which Codex falls back to HTTP."""
    with _client(openai_proxy) as client:
        models = client.models.list()
    assert [m.id for m in models.data] == ["gpt-5.5"]
    r = httpx.get(
        f"{openai_proxy.url}/v1/responses",
        headers={
            "Authorization": f"Bearer {openai_proxy.key}",
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    assert r.status_code == 426, r.text


def test_previous_response_id_resolves_from_compactds_own_store(openai_proxy: Proxy) -> None:  # noqa: F811
    """With store (the default), a response's id continues the conversation: the client sends only
    the new items, the upstream gets the whole history (compacted) and no previous_response_id."""
    api = _upstream(openai_proxy)
    api.script(reply(calls=[("bash", {"command": "ls"})]), reply("Seven files."))
    auth = {"Authorization": f"Bearer {openai_proxy.key}"}

    def listed() -> set[str]:
        return {
            s["id"] for s in httpx.get(f"{openai_proxy.url}/v1/sessions", headers=auth).json()["sessions"]
        }

    before = listed()
    with _client(openai_proxy) as client:
        first = client.responses.create(model="gpt-5.5", input="Count the Python files.", tools=[BASH])
        call = next(o for o in first.output if o.type == "function_call")
        second = client.responses.create(
            model="gpt-5.5",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "7 files"}],
            tools=[BASH],
        )
        assert second.output_text == "Seven files."
        sent = api.requests[-1].body
        assert "previous_response_id" not in sent
        assert [i["type"] for i in sent["input"]] == [
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
        ]
        assert api.failures == [] and api.dropped == 0
        with pytest.raises(openai.BadRequestError) as unknown:
            client.responses.create(
                model="gpt-5.5", previous_response_id="resp_nope", input="hi", tools=[BASH]
            )
        assert unknown.value.code == "previous_response_not_found"
        # a deleted session takes its responses with it: continuing one is an unknown id, not a
        # request on a session that is gone
        (sid,) = listed() - before
        assert httpx.delete(f"{openai_proxy.url}/v1/sessions/{sid}", headers=auth).status_code == 204
        with pytest.raises(openai.BadRequestError) as gone:
            client.responses.create(
                model="gpt-5.5", previous_response_id=second.id, input="go on", tools=[BASH]
            )
        assert gone.value.code == "previous_response_not_found"
        time.sleep(0)


def test_a_clients_own_compaction_is_answered_at_once_from_compactds_history(openai_proxy: Proxy) -> None:  # noqa: F811
    """Codex's summary request (its turn metadata says `compaction`) and POST /v1/responses/compact
    are answered by compactd from the conversation's compacted history, with no upstream call: the
    summary names the commands the conversation ran."""
    api = _upstream(openai_proxy)
    api.script(
        reply(calls=[("bash", {"command": "pytest -q tests/test_dates.py"})]), reply("One test fails.")
    )
    sid = "own-compaction"
    with _client(openai_proxy, default_headers={"x-compactd-session": sid}) as client:
        items: list[Any] = [{"role": "user", "content": "Run the date tests."}]
        first = client.responses.create(model="gpt-5.5", input=items, tools=[BASH], store=False)
        items += [o.model_dump(exclude_none=True) for o in first.output]
        call = next(o for o in first.output if o.type == "function_call")
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": "1 failed"})
        second = client.responses.create(model="gpt-5.5", input=items, tools=[BASH], store=False)
        items += [o.model_dump(exclude_none=True) for o in second.output]
        sent = len(api.requests)
        prompt = {"role": "user", "content": "You are performing a CONTEXT CHECKPOINT COMPACTION. Summarize."}
        meta = json.dumps({"request_kind": "compaction", "session_id": "s"})
        with client.responses.stream(
            model="gpt-5.5",
            input=[*items, prompt],
            tools=[BASH],
            store=False,
            extra_headers={"x-codex-turn-metadata": meta},
        ) as stream:
            summary = stream.get_final_response().output_text
        compacted = client.post(
            "/responses/compact", cast_to=httpx.Response, body={"model": "gpt-5.5", "input": items}
        ).json()
    assert len(api.requests) == sent  # neither reached the upstream
    assert summary.startswith("[compactd summary]") and "pytest -q tests/test_dates.py" in summary
    assert compacted["object"] == "response.compaction"
    assert "pytest -q tests/test_dates.py" in compacted["output"][0]["content"][0]["text"]


def test_who_is_calling_and_where_their_calls_go(openai_proxy: Proxy) -> None:  # noqa: F811
    """The compactd key in x-compactd-key passes the client's own OpenAI key through untouched; a
    tenant's own key (PUT /v1/provider-key?provider=openai) replaces the deployment's; a tenant's
    own upstream (`compactd tenant upstream`) takes its calls."""
    api = _upstream(openai_proxy)
    api.script(reply("one"), reply("two"))
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    own_key = "sk-proj-" + "Mine" * 20
    with openai.OpenAI(
        base_url=f"{openai_proxy.url}/v1",
        api_key=own_key,
        max_retries=0,
        default_headers={"x-compactd-key": openai_proxy.key},
    ) as client:
        client.chat.completions.create(model="gpt-5.5", messages=history)
    assert api.requests[-1].headers["authorization"] == f"Bearer {own_key}"
    auth = {"Authorization": f"Bearer {openai_proxy.key}"}
    tenant_key = "sk-proj-" + "Tenant" * 12
    r = httpx.put(
        f"{openai_proxy.url}/v1/provider-key?provider=openai", json={"api_key": tenant_key}, headers=auth
    )
    assert r.status_code == 200 and r.json()["key_id"]
    try:
        with _client(openai_proxy) as client:
            client.chat.completions.create(model="gpt-5.5", messages=history)
        assert api.requests[-1].headers["authorization"] == f"Bearer {tenant_key}"
        # the Anthropic key is another one: still none held
        assert httpx.get(f"{openai_proxy.url}/v1/provider-key", headers=auth).json() == {"key_id": None}
    finally:
        httpx.delete(f"{openai_proxy.url}/v1/provider-key?provider=openai", headers=auth)
    with OpenAIStandIn() as own:
        own.script(reply("from the tenant's own server"))
        tenant = openai_proxy.settings.default_tenant
        _cli(openai_proxy, "tenant", "upstream", tenant, "--url", own.base_url)
        try:
            wait_for(
                lambda: _ask(openai_proxy, history) == "from the tenant's own server", timeout=15, interval=1
            )
        finally:
            _cli(openai_proxy, "tenant", "upstream", tenant, "--clear")
        assert own.requests and own.failures == []
        wait_for(
            lambda: _ask(openai_proxy, history) == "from the deployment's upstream", timeout=15, interval=1
        )


def _ask(p: Proxy, history: list[Any]) -> str:
    _upstream(p).script(reply("from the deployment's upstream"))
    with _client(p) as client:
        return str(
            client.chat.completions.create(model="gpt-5.5", messages=history).choices[0].message.content
        )


def _cli(p: Proxy, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "api.cli.command", *args],
        env=settings_env(p.settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_a_codex_sub_agent_is_linked_to_its_parents_session(openai_proxy: Proxy) -> None:  # noqa: F811
    """Codex's session-id names a conversation; a sub-agent (its own thread, the parent's in
    x-codex-parent-thread-id) gets a session linked to the parent's."""
    api = _upstream(openai_proxy)
    api.script(reply("parent"), reply("child"))
    parent, child = "01a25000-0000-7000-8000-00000000aaaa", "01a25000-0000-7000-8000-00000000bbbb"
    with _client(openai_proxy) as client:
        client.responses.create(
            model="gpt-5.5",
            input="Plan the work.",
            tools=[BASH],
            store=False,
            extra_headers={"session-id": parent},
        )
        client.responses.create(
            model="gpt-5.5",
            input="Check the parser.",
            tools=[BASH],
            store=False,
            extra_headers={
                "session-id": child,
                "x-codex-parent-thread-id": parent,
                "x-openai-subagent": "collab_spawn",
            },
        )
    auth = {"Authorization": f"Bearer {openai_proxy.key}"}
    sessions = httpx.get(f"{openai_proxy.url}/v1/sessions?limit=200", headers=auth).json()["sessions"]
    (p,) = [s["id"] for s in sessions if parent in s["id"]]
    (c,) = [s["id"] for s in sessions if child in s["id"]]
    wait_for(lambda: _session(openai_proxy, c)["version"] == 2, timeout=10)
    assert _session(openai_proxy, c)["parent_session_id"] == p
    # the headers Codex tells the provider of its session go on upstream
    assert api.requests[-1].headers["x-codex-parent-thread-id"] == parent


def test_a_client_that_sends_back_only_the_text_of_a_reply_stays_in_one_session(openai_proxy: Proxy) -> None:  # noqa: F811
    """Many Responses clients keep only a reply's text: the conversation still extends its session
    (a reasoning item is not part of a reply's fingerprint), and the upstream keeps getting the
    reasoning the session stored, on its own prefix."""
    api = _upstream(openai_proxy)
    api.script(reply("one"), reply("two"), reply("three"))
    sid = "text-only"
    items: list[Any] = [{"role": "user", "content": "Count to three, one a turn."}]
    with _client(openai_proxy, default_headers={"x-compactd-session": sid}) as client:
        for n in range(3):
            r = client.responses.create(model="gpt-5.5", input=items, tools=[BASH], **STATELESS)
            items += [
                {"role": "assistant", "content": r.output_text},
                {"role": "user", "content": f"next {n}"},
            ]
    sessions = httpx.get(
        f"{openai_proxy.url}/v1/sessions?limit=200", headers={"Authorization": f"Bearer {openai_proxy.key}"}
    ).json()
    assert [s["id"] for s in sessions["sessions"] if s["id"].startswith(sid)] == [sid]
    assert [r.reasoning_kept for r in api.requests] == [0, 1, 2] and api.dropped == 0


def test_reasoning_the_client_did_not_ask_to_keep_is_not_sent_back_stateless(openai_proxy: Proxy) -> None:  # noqa: F811
    """With `store: false` and no encrypted content asked for, a reasoning item could never be read
    back by the upstream (it kept nothing): compactd stores it but sends it no more, so no request
    is refused; with `reasoning` set, compactd asks for the encrypted content itself."""
    api = _upstream(openai_proxy)
    api.script(reply("one"), reply("two"), reply("three"))
    items: list[Any] = [{"role": "user", "content": "Count, one a turn."}]
    with _client(openai_proxy, default_headers={"x-compactd-session": "stateless"}) as client:
        for n in range(2):
            r = client.responses.create(model="gpt-5.5", input=items, tools=[BASH], store=False)
            items += [o.model_dump(exclude_none=True) for o in r.output] + [
                {"role": "user", "content": f"next {n}"}
            ]
        client.responses.create(
            model="gpt-5.5", input=items, tools=[BASH], store=False, reasoning={"effort": "low"}
        )
    assert api.failures == []
    assert all(i.get("type") != "reasoning" for i in api.requests[2].body["input"])
    assert api.requests[2].body["include"] == ["reasoning.encrypted_content"]
