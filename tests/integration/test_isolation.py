"""Per-tenant isolation on every route of the OpenAPI document: no key is 401, another tenant's session is 404 like a missing one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.http.app import create_app
from tests.integration.conftest import flush_prefix, make_settings
from worker.settings import Settings
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services
PUBLIC = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics")}
# a valid request for each operation, so that only the tenant decides the answer
BODIES: dict[tuple[str, str], Any] = {
    ("post", "/v1/sessions/{sid}/turns"): {"messages": [{"role": "user", "content": "hello"}]},
    ("post", "/v1/sessions/{sid}/compact"): {"focus": "the tests"},
    ("put", "/v1/sessions/{sid}/activity"): {"state": "idle"},
    ("put", "/v1/sessions/{sid}/memory"): {"items": [{"key": "k", "value": "v"}]},
    ("patch", "/v1/sessions/{sid}/memory"): {"ops": [{"op": "set", "section": "task", "value": "steal"}]},
    ("post", "/v1/sessions/{sid}/memory/restore"): {"event": 1},
}
QUERIES: dict[tuple[str, str], dict[str, str]] = {("delete", "/v1/sessions/{sid}/memory"): {"all": "true"}}


def operations() -> list[tuple[str, str]]:
    """Every (method, path) the app documents."""
    app = create_app(Settings())
    return sorted((m, p) for p, ms in app.openapi()["paths"].items() for m in ms)


OPERATIONS = operations()
PROTECTED = [op for op in OPERATIONS if op not in PUBLIC]


class Tenants:
    def __init__(self, client: TestClient, a: str, b: str, b_ref: str) -> None:
        self.client, self.a, self.b, self.b_ref = client, a, b, b_ref

    def call(self, method: str, path: str, key: str | None, sid: str, ref: str = "f") -> Any:
        url = path.replace("{sid}", sid).replace("{ref}", ref)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = BODIES.get((method, path))
        return self.client.request(
            method.upper(), url, json=body, headers=headers, params=QUERIES.get((method, path))
        )


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Tenants]:
    """Tenant B owns session "theirs" (turns, a file, memory); tenant A owns nothing yet."""
    tmp = tmp_path_factory.mktemp("iso")
    # a small offload threshold: B's long tool output becomes a virtual file with a ref
    settings = make_settings(
        tmp, f"sqlite:///{tmp / 'c.db'}", redis_url, offload_tokens=200, preview_tokens=20
    )
    with TestClient(create_app(settings, enqueue=lambda *a: None), raise_server_exceptions=False) as client:
        engine = client.app.state.resources.engine  # type: ignore[attr-defined]
        a, b = create_tenant(engine, "a")[1], create_tenant(engine, "b")[1]
        hb = {"Authorization": f"Bearer {b}"}
        call = {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "cat", "input": {}}],
        }
        out = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "line\n" * 2000}],
        }
        r = client.post(
            "/v1/sessions/theirs/turns",
            json={"messages": [{"role": "user", "content": "go"}, call, out]},
            headers=hb,
        )
        assert r.status_code == 200, r.text
        client.put(
            "/v1/sessions/theirs/memory", json={"items": [{"key": "plan", "value": "B's"}]}, headers=hb
        )
        (file,) = client.get("/v1/sessions/theirs/files", headers=hb).json()["files"]
        yield Tenants(client, a, b, file["ref"])
    flush_prefix(redis_url, settings.redis_prefix)


def test_every_documented_operation_is_covered() -> None:
    """A new route must be added here (with a valid body if it takes one) before it can ship."""
    assert {p for _, p in PROTECTED} >= {"/v1/tools", "/v1/sessions/{sid}/prompt"}
    for method, path in PROTECTED:
        if method in ("post", "put", "patch") and path not in {p for _, p in BODIES}:
            pytest.fail(f"no sample body for {method.upper()} {path}")


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
@pytest.mark.parametrize("header", [None, "Bearer cpd_unknown", "Basic YTpi", "Bearer "])
def test_no_valid_key_is_401(tenants: Tenants, method: str, path: str, header: str | None) -> None:
    """Without a key, with an unknown one or another scheme: 401 problem with WWW-Authenticate, on every protected operation."""
    url = path.replace("{sid}", "theirs").replace("{ref}", tenants.b_ref)
    headers = {"Authorization": header} if header else {}
    r = tenants.client.request(method.upper(), url, json=BODIES.get((method, path)), headers=headers)
    assert r.status_code == 401, r.text
    assert (
        r.headers["content-type"] == "application/problem+json" and r.headers["www-authenticate"] == "Bearer"
    )


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
def test_another_tenants_session_is_404_like_a_missing_one(tenants: Tenants, method: str, path: str) -> None:
    """Tenant A naming B's session (and B's file ref) gets exactly the answer of a session that does not exist; B's data is untouched."""
    hb = {"Authorization": f"Bearer {tenants.b}"}
    before = tenants.client.get("/v1/sessions/theirs", headers=hb).json()
    memory_before = tenants.client.get("/v1/sessions/theirs/memory", headers=hb).json()["sections"]
    theirs = tenants.call(method, path, tenants.a, "theirs", tenants.b_ref)
    # a fresh name each time: an append by an earlier case creates the session it names
    missing = tenants.call(method, path, tenants.a, f"missing-{uuid.uuid4().hex[:8]}", tenants.b_ref)
    if "{sid}" not in path:
        assert theirs.status_code == 200  # /v1/tools: nothing of a session in it
    elif (method, path) == ("post", "/v1/sessions/{sid}/turns"):
        # an append creates A's own session of that name: never a way into B's
        assert (
            theirs.status_code == 200
            and tenants.call("get", "/v1/sessions/{sid}", tenants.b, "theirs").json()["version"]
            == before["version"]
        )
        tenants.call("delete", "/v1/sessions/{sid}", tenants.a, "theirs")
    else:
        assert theirs.status_code == 404, theirs.text
        assert (theirs.status_code, theirs.json()) == (missing.status_code, missing.json())
        assert theirs.headers["content-type"] == "application/problem+json"
    after = tenants.client.get("/v1/sessions/theirs", headers=hb)
    assert after.status_code == 200 and after.json()["version"] == before["version"]
    assert tenants.client.get("/v1/sessions/theirs/memory", headers=hb).json()["sections"] == memory_before
    assert tenants.client.get(f"/v1/sessions/theirs/files/{tenants.b_ref}", headers=hb).status_code == 200


@pytest.mark.parametrize(("method", "path"), sorted(PUBLIC))
def test_public_operations_reveal_no_tenant_data(tenants: Tenants, method: str, path: str) -> None:
    """Health and metrics answer without a key and name no session or tenant."""
    r = tenants.client.request(method.upper(), path)
    assert r.status_code == 200 and "theirs" not in r.text and tenants.b not in r.text
