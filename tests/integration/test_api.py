"""The HTTP API over real SQLite/PostgreSQL and Redis: auth, tenancy, problem+json for every bad input, the resources."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.factories import assistant, assistant_tool, result, user
from tests.integration.conftest import AppClient, make_settings, open_app
from tests.integration.conftest import assert_problem as problem
from worker.compaction.validate import request_problems

pytestmark = pytest.mark.services
MARKER = "zebra-quokka-4711"  # appears in request content; must never come back in an error body


def with_boom(app: FastAPI) -> FastAPI:
    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError(f"internal detail {MARKER}")

    return app


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, module_database_url: str, redis_url: str
) -> Iterator[AppClient]:
    """One app per backend for the module; each test gets tenants of its own (`api`)."""
    tmp = tmp_path_factory.mktemp("api")
    settings = make_settings(tmp, module_database_url, redis_url, max_request_bytes=200_000)
    with open_app(settings, app=with_boom) as client:
        yield client


@pytest.fixture
def api(app: AppClient) -> AppClient:
    return app.fresh_tenants()


@pytest.fixture
def own_app(tmp_path: Path, database_url: str, redis_url: str) -> Iterator[AppClient]:
    """An app of the test's own, for what reads app-wide counters (metrics)."""
    with open_app(make_settings(tmp_path, database_url, redis_url)) as client:
        yield client


def assert_problem(r: Any, status: int) -> dict:
    return problem(r, status, MARKER)


def test_append_then_fetch_returns_every_turn_as_a_valid_request(api: AppClient) -> None:
    """Appended turns come back in order, with the system prompt, and a compaction enqueued."""
    r = api.append(
        "s1", user("task"), assistant_tool("toolu_01"), system="You are helpful.", context_window=50_000
    )
    assert r.json() == {
        **{"session_id": "s1", "first_seq": 1, "last_seq": 2, "version": 2},
        **{"context_window": 50_000, "window_assumed": False, "warnings": []},
    }
    api.append("s1", result("toolu_01"))
    p = api.get("/v1/sessions/s1/prompt").json()
    assert (p["version"], p["epoch"], p["compacted_through"]) == (3, 0, 0)
    assert p["system"][0]["text"] == "You are helpful."
    assert [m["role"] for m in p["messages"]] == ["user", "assistant", "user"]
    # nothing of the fetch's own but its breakpoint on the newest block
    assert p["messages"][-1]["content"] == [
        {**result("toolu_01")["content"][0], "cache_control": {"type": "ephemeral"}}
    ]
    assert p["budget_tokens"] == 50_000 - 8_192 and p["token_count"] > 0
    assert request_problems({"system": p["system"], "messages": p["messages"]}) == []
    assert [e[2] for e in api.enqueued] == [2, 3]


def test_missing_or_bad_key_is_401_problem(api: AppClient) -> None:
    """No Authorization header, a wrong scheme or an unknown key is a 401 problem."""
    assert_problem(api.client.get("/v1/sessions/x/prompt"), 401)
    assert_problem(
        api.client.get("/v1/sessions/x/prompt", headers={"Authorization": f"Basic {api.key}"}), 401
    )
    assert_problem(api.get("/v1/sessions/x/prompt", key="cpd_nope"), 401)


def test_an_anonymous_body_over_the_size_limit_is_401_not_413(api: AppClient) -> None:
    """Without a key, even a body past the request-size limit is a 401: the caller learns nothing
    about the limit (with a key it is the limit's 413)."""
    big = {"messages": [{"role": "user", "content": "x" * 300_000}]}
    assert_problem(api.client.post("/v1/sessions/s/turns", json=big), 401)
    assert_problem(api.client.post("/v1/sessions/s/turns", json=big, headers=api.auth), 413)


_ids = st.sampled_from(["toolu_1", "toolu_2", "call_x", ""])
_text = st.text(max_size=20) | st.just(MARKER)
_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": _ids,
            "name": st.sampled_from(["bash", "Read", ""]),
            "input": st.dictionaries(st.text(max_size=4), _text, max_size=2),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_result"),
            "tool_use_id": _ids,
            "content": _text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _text})),
        }
    ),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": _text, "signature": _text}),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["image", "hologram"]),
            "source": st.dictionaries(st.text(max_size=4), _text),
        }
    ),
    st.integers() | st.none() | _text,
)
_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system", "tool"]),
        "content": _text | st.lists(_block, max_size=3) | st.integers(),
    }
)
# mostly well-formed turns too, so that appends are accepted and the session grows between examples
_plain = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.text("abc xyz", min_size=1, max_size=9)}
)
_body = st.fixed_dictionaries(
    {"messages": st.lists(_message, max_size=4) | st.lists(_plain, min_size=1, max_size=3) | _text},
    optional={
        "context_window": st.integers(-5, 10**7) | _text,
        "output_reserve": st.integers(-5, 10**6),
        "model": _text,
        "system": _text | st.integers(),
    },
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_body)
def test_any_append_is_accepted_whole_or_refused_whole(api: AppClient, body: dict[str, Any]) -> None:
    """Arbitrary bodies, one session: a refusal is a 4xx problem and changes nothing; an accepted
    append leaves a prompt that is a valid Anthropic request. Never a 500."""
    before = api.get("/v1/sessions/fz/prompt")
    r = api.client.post("/v1/sessions/fz/turns", json=body, headers=api.auth)
    after = api.get("/v1/sessions/fz/prompt")
    event(f"status {r.status_code}")
    if r.status_code == 200:
        prompt = after.json()
        assert (
            request_problems(
                {"system": prompt["system"], "messages": prompt["messages"]}, allow_pending_tool_use=True
            )
            == []
        )
    else:
        assert 400 <= r.status_code < 500
        assert_problem(r, r.status_code)
        assert (after.status_code, after.content) == (before.status_code, before.content)


def test_another_tenants_session_is_404(api: AppClient) -> None:
    """A session is invisible to other tenants: prompt, metadata, memory and delete are all 404."""
    api.append("mine", user("secret plans"))
    other = {"Authorization": f"Bearer {api.other_key}"}
    for method, path in [("GET", "/prompt"), ("GET", ""), ("GET", "/memory"), ("DELETE", "")]:
        assert_problem(api.client.request(method, f"/v1/sessions/mine{path}", headers=other), 404)
    assert api.get("/v1/sessions/mine").json()["version"] == 1


@pytest.mark.parametrize(
    "kind",
    [
        "bad_json",
        "wrong_types",
        "empty_messages",
        "unknown_block",
        "orphan_result",
        "text_while_tool_pending",
        "starts_with_assistant",
        "oversized",
        "idempotency_reuse",
        "integer_beyond_64_bits",
    ],
)
def test_bad_input_is_a_problem_and_leaves_the_session_unchanged(api: AppClient, kind: str) -> None:
    """Every kind of bad append gets problem+json without echoing content, and the session stays as it was."""
    api.append("s", user("task"), assistant_tool("toolu_9"), headers={"Idempotency-Key": "k1"})
    before = api.get("/v1/sessions/s/prompt").json()
    url, auth = "/v1/sessions/s/turns", api.auth
    if kind == "bad_json":
        r = api.client.post(
            url,
            content=b'{"messages": [' + MARKER.encode(),
            headers={**auth, "content-type": "application/json"},
        )
    elif kind == "wrong_types":
        r = api.client.post(url, json={"messages": MARKER, "context_window": "big"}, headers=auth)
    elif kind == "empty_messages":
        r = api.client.post(url, json={"messages": []}, headers=auth)
    elif kind == "unknown_block":
        r = api.append("s", {"role": "user", "content": [{"type": "hologram", "data": MARKER}]})
    elif kind == "orphan_result":
        r = api.append("s", result("toolu_unknown", MARKER))
    elif kind == "text_while_tool_pending":
        r = api.append("s", user(MARKER))
    elif kind == "starts_with_assistant":
        r = api.append("fresh", {"role": "assistant", "content": MARKER})
    elif kind == "oversized":
        r = api.append("s", result("toolu_9", MARKER * 20_000))
    elif kind == "integer_beyond_64_bits":  # orjson, which stores and hashes messages, cannot write it
        big = {"type": "tool_result", "tool_use_id": "toolu_9", "content": MARKER, "n": 2**64}
        r = api.append("s", {"role": "user", "content": [big]}, headers={"Idempotency-Key": "k2"})
    else:
        r = api.append("s", user(MARKER), headers={"Idempotency-Key": "k1"})
    body = assert_problem(r, {"oversized": 413, "bad_json": 400}.get(kind, 422))
    if kind == "integer_beyond_64_bits":
        assert "messages[0] holds an integer outside the 64-bit range" in r.text
    if kind == "wrong_types":
        assert {tuple(e["loc"]) for e in body["errors"]} == {("body", "messages"), ("body", "context_window")}
    assert api.get("/v1/sessions/s/prompt").json() == before
    assert_problem(api.get("/v1/sessions/fresh"), 404)


@pytest.mark.parametrize(
    ("stored", "said"),
    [
        ([], "indices are those of the messages sent"),
        ([user("task")], "messages[0] is the session's stored user turns"),
        (
            [user("task"), {"role": "assistant", "content": "ok"}],
            "stands for the stored turns before the last",
        ),
    ],
)
def test_an_orphan_result_s_422_says_what_its_indices_count(api: AppClient, stored: list, said: str) -> None:
    """The message names what messages[i] counts: the messages sent on a new session, the stored user
    turns on a session without an assistant message, a stand-in before the last assistant one else."""
    if stored:
        api.appended("orphans", *stored)
    body = assert_problem(api.append("orphans", result("toolu_nowhere", "x")), 422)
    assert said in body["detail"], body["detail"]


def test_idempotent_retry_returns_the_original_response(api: AppClient) -> None:
    """A retried append with the same key and body returns the first response and appends nothing."""
    first = api.append("s", user("once"), headers={"Idempotency-Key": "abc"}).json()
    again = api.append("s", user("once"), headers={"Idempotency-Key": "abc"}).json()
    expected = {"session_id": "s", "first_seq": 1, "last_seq": 1, "version": 1}
    expected |= {"context_window": 200_000, "window_assumed": False, "warnings": []}
    assert first == again == expected
    assert api.get("/v1/sessions/s").json()["version"] == 1


def test_secrets_are_redacted_before_storage(api: AppClient) -> None:
    """An AWS key in a message is served as a typed placeholder, never verbatim."""
    api.append("s", user("my key is AKIAIOSFODNN7EXAMPLF ok"))
    text = api.get("/v1/sessions/s/prompt").text
    assert "AKIAIOSFODNN7EXAMPLF" not in text and "[REDACTED:aws_access_key:" in text


def test_activity_header_and_resource(api: AppClient) -> None:
    """X-Compactd-Activity on append and PUT /activity set the session's declared state."""
    api.append("s", user("go"), headers={"X-Compactd-Activity": "busy"})
    assert api.get("/v1/sessions/s").json()["activity"] == "busy"
    r = api.client.put("/v1/sessions/s/activity", json={"state": "idle"}, headers=api.auth)
    assert r.json() == {"session_id": "s", "activity": "idle"}
    assert api.get("/v1/sessions/s").json()["activity"] == "idle"
    assert_problem(api.client.put("/v1/sessions/s/activity", json={"state": "asleep"}, headers=api.auth), 422)


def test_memory_is_rendered_into_the_prompt_and_capped(api: AppClient) -> None:
    """Memory items show in the prompt (in the next user turn's memory note, until a rewrite from
    the top renders them into the block); past the hard cap the PUT is a 422 problem."""
    api.append("s", user("go"))
    r = api.client.put(
        "/v1/sessions/s/memory",
        json={"items": [{"key": "goal", "value": "ship it", "pinned": True}]},
        headers=api.auth,
    )
    assert r.status_code == 200 and r.json()["items"][0]["key"] == "goal"
    api.append("s", assistant("ok"), user("go on"))
    messages = api.get("/v1/sessions/s/prompt").json()["messages"]
    assert "goal: ship it" in messages[-1]["content"][-1]["text"]
    too_big = {"items": [{"key": "k", "value": f"{MARKER} " * 2_000}]}
    assert_problem(api.client.put("/v1/sessions/s/memory", json=too_big, headers=api.auth), 422)
    api.client.delete("/v1/sessions/s/memory?key=goal", headers=api.auth)
    assert api.get("/v1/sessions/s/memory").json()["items"] == []


def test_delete_removes_the_session(api: AppClient) -> None:
    """DELETE makes the session 404 and a new append starts again from seq 1."""
    api.append("s", user("a"))
    assert api.client.delete("/v1/sessions/s", headers=api.auth).status_code == 204
    assert_problem(api.get("/v1/sessions/s/prompt"), 404)
    assert api.append("s", user("b")).json()["first_seq"] == 1


def test_health_readiness_metrics_openapi(own_app: AppClient) -> None:
    """healthz, readyz, metrics (with routes and fetch sources) and the OpenAPI document answer."""
    api = own_app
    api.append("s", user("a"))
    api.get("/v1/sessions/s/prompt")
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").json() == {"status": "ok"}
    metrics = api.client.get("/metrics").text
    assert 'compactd_prompt_fetches_total{source="db"} 1.0' in metrics
    assert 'route="/v1/sessions/{sid}/turns"' in metrics and "compactd_appends_total 1.0" in metrics
    paths = api.client.get("/openapi.json").json()["paths"]
    assert {"/v1/sessions/{sid}/turns", "/v1/sessions/{sid}/prompt", "/v1/sessions/{sid}/memory"} <= set(
        paths
    )


def test_unexpected_errors_are_a_500_problem_without_details(api: AppClient) -> None:
    """An exception inside a route becomes a bare 500 problem: no message, no stack trace."""
    assert_problem(api.client.get("/boom"), 500)


def test_offloaded_output_is_a_file_the_agent_can_read_back(api: AppClient) -> None:
    """A tool output over the offload threshold becomes a virtual file: listed, readable by lines and grep, reads logged."""
    big = "\n".join(f"line {i}: value {i * 7}" for i in range(6_000))
    api.append("s", user("run it"), assistant_tool("toolu_big"))
    r = api.client.post(
        "/v1/sessions/s/turns", json={"messages": [result("toolu_big", big)]}, headers=api.auth
    )
    assert r.status_code == 200, r.text
    listed = api.get("/v1/sessions/s/files").json()["files"]
    assert len(listed) == 1 and listed[0]["kind"] == "offload"
    ref = listed[0]["ref"]
    assert ref in api.get("/v1/sessions/s/prompt").text
    lines = api.get(f"/v1/sessions/s/files/{ref}?start_line=10&end_line=12").json()
    assert lines["text"] == "line 9: value 63\nline 10: value 70\nline 11: value 77\n"
    hits = api.get(f"/v1/sessions/s/files/{ref}?pattern=value%2041993$").json()
    assert hits["text"] == "6000: line 5999: value 41993"
    capped = api.get(f"/v1/sessions/s/files/{ref}?pattern=value%204&max_matches=3").json()
    assert len(capped["text"].splitlines()) == 3 and capped["truncated"]
    assert_problem(api.get(f"/v1/sessions/s/files/{ref}?pattern=(unclosed"), 422)
    assert_problem(api.get("/v1/sessions/s/files/f_missing"), 404)
    assert api.get("/v1/sessions/s/files").json()["files"][0]["read_ranges"] == [
        "lines 10-12",
        "grep",
    ]  # both greps log as one "grep"
    assert {t["name"] for t in api.get("/v1/tools").json()} >= {"read_file", "grep"}


def test_sub_agent_sessions_link_to_their_parent(api: AppClient) -> None:
    """A session created with parent_session_id and parent_tool_use_id reports both; the parent's prompt is untouched."""
    api.append("parent", user("delegate"), assistant_tool("toolu_task"))
    api.append("child", user("sub task"), parent_session_id="parent", parent_tool_use_id="toolu_task")
    info = api.get("/v1/sessions/child").json()
    assert (info["parent_session_id"], info["parent_tool_use_id"]) == ("parent", "toolu_task")
    assert "sub task" not in api.get("/v1/sessions/parent/prompt").text


def test_an_assistant_reply_appended_as_the_api_returned_it_is_accepted(api: AppClient) -> None:
    """A reply dumped from the SDK (a blank text block before the tool call, None-valued fields,
    a signed thinking block) is appended, and the served prompt is a valid request."""
    import anthropic.types as at

    reply = at.Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "content": [
                {"type": "thinking", "thinking": "look first", "signature": "sig=="},
                {"type": "text", "text": "\n\n", "citations": None},
                {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "ls"}},
            ],
        }
    )
    message = {"role": "assistant", "content": reply.model_dump()["content"]}
    assert api.append("sdk", user("task"), message).status_code == 200
    api.append("sdk", result("toolu_9"))
    p = api.get("/v1/sessions/sdk/prompt").json()
    assert request_problems({"system": p["system"], "messages": p["messages"]}) == []
    assert p["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "look first",
        "signature": "sig==",
    }


def test_a_prompt_ending_with_the_models_turn_is_flagged_as_a_prefill(api: AppClient) -> None:
    """A served prompt whose last message is the assistant's says `"prefill": true`; the next user turn clears it."""
    assert (
        api.append("pf", user("hello"), {"role": "assistant", "content": "Hi, what next?"}).status_code == 200
    )
    served = api.get("/v1/sessions/pf/prompt").json()
    assert served["messages"][-1]["role"] == "assistant" and served["prefill"] is True
    assert api.append("pf", user("list the files")).status_code == 200
    served = api.get("/v1/sessions/pf/prompt").json()
    assert served["messages"][-1]["role"] == "user" and served["prefill"] is False


def test_an_appends_compaction_job_is_sent_after_its_response(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    """The compaction job an append asks for goes out once the response is complete, and still goes out."""
    events: list[Any] = []

    def after_response(app: FastAPI) -> Any:
        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            async def send_and_note(message: Any) -> None:
                await send(message)
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    events.append("response")

            await app(scope, receive, send_and_note if scope["type"] == "http" else send)

        recorded.state = app.state  # type: ignore[attr-defined]
        return recorded

    settings = make_settings(tmp_path, database_url, redis_url)
    with open_app(settings, enqueue=lambda *job: events.append(job), app=after_response) as api:
        api.appended("s1", user("task"))
        assert events == ["response", (api.tenant, api.session_pk("s1"), 1)]
