"""The fetch's fast path (api/http/routes/prompt.py PromptFastPath) answers exactly as the routed endpoint
does: the same status, body and headers for a prompt, a missing session, a bad key, a rate limit
and an id the route refuses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.http.app import create_app
from api.http.routes.prompt import PromptFastPath
from tests.integration.conftest import flush_prefix, make_settings
from worker.flows import compact as jobs
from worker.store.sessions import get_session
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services


def routed_only(app: FastAPI) -> FastAPI:
    """The same app without the fast path (before its middleware stack is built)."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not PromptFastPath]
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
