"""The fast paths (api/http/middleware/fast_paths.py) answer exactly as the routed endpoints
does: the same status, body and headers for a prompt, a missing session, a bad key, a rate limit
and an id the route refuses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.http.app import create_app
from api.http.middleware.fast_paths import FastPaths
from api.http.routes import prompt, turns
from tests.integration.conftest import flush_prefix, make_settings
from worker.flows import compact as jobs
from worker.store.sessions import get_session
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services


def routed_only(app: FastAPI) -> FastAPI:
    """The same app without the fast path (before its middleware stack is built)."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not FastPaths]
    return app


@pytest.fixture
def clients(tmp_path: Path, redis_url: str) -> Iterator[tuple[TestClient, TestClient, str]]:
    """Two apps on one database and Redis prefix: with the fast path, and without it."""
    settings = make_settings(
        tmp_path, f"sqlite:///{tmp_path / 'f.db'}", redis_url, rate_limit_per_second=0.5, rate_limit_burst=40
    )
    with ExitStack() as stack:
        fast = stack.enter_context(
            TestClient(create_app(settings, enqueue=lambda *a: None), raise_server_exceptions=False)
        )
        routed = stack.enter_context(
            TestClient(
                routed_only(create_app(settings, enqueue=lambda *a: None)), raise_server_exceptions=False
            )
        )
        res = fast.app.state.resources  # type: ignore[attr-defined]
        tid, key = create_tenant(res.engine, "fast")
        auth = {"Authorization": f"Bearer {key}"}
        messages = [
            {"role": "user", "content": "run the tests"},
            {"role": "assistant", "content": "3 passed"},
        ]
        assert (
            fast.post("/v1/sessions/s1/turns", json={"messages": messages}, headers=auth).status_code == 200
        )
        jobs.compact(tid, get_session(res.engine, tid, "s1").id, 2, res)
        assert (
            fast.post("/v1/sessions/s1/turns", json={"messages": messages[:1]}, headers=auth).status_code
            == 200
        )
        yield fast, routed, key
    flush_prefix(redis_url, settings.redis_prefix)


def answer(client: TestClient, path: str, key: str) -> tuple[int, bytes, dict[str, Any]]:
    r = client.get(path, headers={"Authorization": f"Bearer {key}"})
    kept = {k: v for k, v in r.headers.items() if k in ("content-type", "retry-after", "www-authenticate")}
    return r.status_code, r.content, kept


@pytest.mark.parametrize(
    ("path", "key_of", "status"),
    [
        ("/v1/sessions/s1/prompt", "tenant", 200),  # the snapshot plus a tail
        ("/v1/sessions/s1/prompt?x=1", "tenant", 200),  # query strings are ignored by both
        ("/v1/sessions/nope/prompt", "tenant", 404),
        ("/v1/sessions/s1/prompt", "cpd_unknown", 401),
        ("/v1/sessions/bad%20id/prompt", "tenant", 422),  # the route's own validation
    ],
)
def test_fast_path_answers_as_the_routed_endpoint(
    clients: tuple[TestClient, TestClient, str], path: str, key_of: str, status: int
) -> None:
    """Status, body bytes and the headers a client acts on are the same on both paths."""
    fast, routed, key = clients
    used = key if key_of == "tenant" else key_of
    got, expected = answer(fast, path, used), answer(routed, path, used)
    assert got[0] == status and got == expected


def test_fast_path_is_rate_limited_like_the_route(clients: tuple[TestClient, TestClient, str]) -> None:
    """Past the burst the fast path answers 429 problem+json with Retry-After, like every route."""
    fast, _, key = clients
    statuses = [answer(fast, "/v1/sessions/s1/prompt", key) for _ in range(60)]
    refused = next(s for s in statuses if s[0] == 429)
    assert refused[2]["content-type"] == "application/problem+json" and int(refused[2]["retry-after"]) >= 1


def appended(client: TestClient, sid: str, key: str, body: bytes, **headers: str) -> tuple[int, Any, str]:
    """An append's status, JSON answer with the session id made neutral, and content type."""
    r = client.post(
        f"/v1/sessions/{sid}/turns",
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", **headers},
    )
    text = r.text.replace(sid, "<sid>")
    return r.status_code, orjson.loads(text) if text else None, r.headers.get("content-type", "")


TURN = b'{"messages": [{"role": "user", "content": "run the tests"}]}'


@pytest.mark.parametrize(
    ("body", "headers", "key_of", "status"),
    [
        (TURN, {}, "tenant", 200),
        (TURN, {"Idempotency-Key": "k1", "X-Compactd-Activity": "idle"}, "tenant", 200),
        (b'{"messages": [', {}, "tenant", 400),  # not JSON
        (b"", {}, "tenant", 422),  # no body: the route's "field required"
        (b'{"messages": []}', {}, "tenant", 422),  # the schema
        (b'{"messages": [{"role": "user", "content": "x"}], "extra": 1}', {}, "tenant", 422),
        (TURN, {"Idempotency-Key": "k" * 201}, "tenant", 422),  # a header the route refuses
        (TURN, {"X-Compactd-Activity": "asleep"}, "tenant", 422),
        (TURN, {"Content-Type": "application/vnd.api+json"}, "tenant", 200),  # the route's, as JSON
        (TURN, {"Content-Type": "application/json; charset=utf-8"}, "tenant", 200),
        (b'{"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}', {}, "tenant", 422),
        (TURN, {}, "cpd_unknown", 401),
        (b'{"messages": [', {}, "cpd_unknown", 400),  # malformed JSON comes first, as on the route
    ],
)
def test_append_fast_path_answers_as_the_routed_endpoint(
    clients: tuple[TestClient, TestClient, str],
    body: bytes,
    headers: dict[str, str],
    key_of: str,
    status: int,
) -> None:
    """An append taken by the fast path and one the route answers: the same status and answer
    (each on a session of its own), valid or not."""
    fast, routed, key = clients
    used = key if key_of == "tenant" else key_of
    got = appended(fast, "fast-a", used, body, **headers)
    expected = appended(routed, "routed-a", used, body, **headers)
    assert got[0] == status and got == expected


def test_append_fast_path_stores_what_the_route_stores(clients: tuple[TestClient, TestClient, str]) -> None:
    """The same turns appended on each path read back the same from the session's prompt."""
    fast, routed, key = clients
    body = b'{"messages": [{"role": "user", "content": "token=ghp_' + b"a1B2" * 9 + b'"}]}'
    assert appended(fast, "fast-b", key, body)[0] == appended(routed, "routed-b", key, body)[0] == 200
    auth = {"Authorization": f"Bearer {key}"}
    prompts = [
        c.get(f"/v1/sessions/{s}/prompt", headers=auth).json()
        for c, s in ((fast, "fast-b"), (routed, "routed-b"))
    ]
    assert prompts[0]["messages"] == prompts[1]["messages"] and "ghp_" not in str(prompts[0])


def test_valid_fetches_and_appends_take_the_fast_path(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handlers the fast paths run answer a valid fetch and append themselves (not the route)."""
    taken: list[str] = []

    def spy(name: str, handler: Any) -> Any:
        async def handle(*args: Any) -> Any:
            answer = await handler(*args)
            taken.append(name if answer is not None else f"{name} passed on")
            return answer

        return handle

    # the handlers the middleware holds (the routes call their own functions, not these)
    for module, name in ((turns, "append"), (prompt, "fetch")):
        path = module.fast_path()
        monkeypatch.setattr(module, "fast_path", lambda p=path, n=name: replace(p, handler=spy(n, p.handler)))
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 't.db'}", redis_url)
    with TestClient(create_app(settings, enqueue=lambda *a: None)) as client:
        _, key = create_tenant(client.app.state.resources.engine, "taken")  # type: ignore[attr-defined]
        auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        assert client.post("/v1/sessions/t/turns", content=TURN, headers=auth).status_code == 200
        assert client.get("/v1/sessions/t/prompt", headers=auth).status_code == 200
        assert client.post("/v1/sessions/t/turns", content=b"{}", headers=auth).status_code == 422
    assert taken == ["append", "fetch", "append passed on"]
    flush_prefix(redis_url, settings.redis_prefix)


def test_an_append_sends_its_job_only_when_it_claims_it(tmp_path: Path, redis_url: str) -> None:
    """The job an append asks for is claimed with its note and sent once: appends while it waits
    send nothing; once a job has started (its claim released), the next append sends another."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'j.db'}", redis_url)
    broker = redis.Redis.from_url(redis_url)
    try:
        with TestClient(create_app(settings)) as client:  # the Celery sender, on this test's queue
            res = client.app.state.resources  # type: ignore[attr-defined]
            tid, key = create_tenant(res.engine, "jobs")
            auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            queued = []
            for i in range(3):
                if i == 2:  # a worker took the job: the claim goes
                    res.cache.claims.release_job_claim(get_session(res.engine, tid, "j").id)
                assert client.post("/v1/sessions/j/turns", content=TURN, headers=auth).status_code == 200
                queued.append(broker.llen(settings.queue))  # background tasks ran before post returned
            assert queued == [1, 1, 2]
    finally:
        flush_prefix(redis_url, settings.redis_prefix)
        broker.delete(settings.queue)
        broker.close()
    flush_prefix(redis_url, settings.redis_prefix)
