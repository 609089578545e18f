"""Schemathesis against a real `compactd api` process with two tenants: no 5xx, responses match the schema, bad data refused, auth never ignored."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings
from worker.store.db import make_engine
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services
PUBLIC = {"/healthz", "/readyz", "/metrics"}
# bounded so the CI run stays well under a minute; COMPACTD_SCHEMATHESIS_EXAMPLES for a longer run
EXAMPLES = int(os.environ.get("COMPACTD_SCHEMATHESIS_EXAMPLES", "8"))
# the long variant: 50 an operation keeps the CI run within its 12 minutes on a slower machine
# (200 took ~190 s of one process on a fast one); COMPACTD_SCHEMATHESIS_LONG_EXAMPLES for more
LONG_EXAMPLES = int(os.environ.get("COMPACTD_SCHEMATHESIS_LONG_EXAMPLES", "50"))


class Deployment:
    def __init__(self, base: str, key_a: str, key_b: str) -> None:
        self.base, self.key_a, self.key_b = base, key_a, key_b


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, pg_schema_url: str, redis_url: str
) -> Iterator[Deployment]:
    """One real API process on PostgreSQL and Redis; tenant B owns session "b-session"."""
    tmp = tmp_path_factory.mktemp("st")
    port = free_port()
    s = make_settings(tmp, pg_schema_url, redis_url, port=port, max_request_bytes=1_000_000)
    engine = make_engine(s.database_url)
    from worker.store.db import migrate

    migrate(engine)
    key_a = create_tenant(engine, f"st-a-{port}")[1]
    key_b = create_tenant(engine, f"st-b-{port}")[1]
    engine.dispose()
    api = Worker(s, "api", log=tmp / "api.log")
    try:
        api.wait_ready("api.started", timeout=120)
        base = f"http://127.0.0.1:{port}"
        r = httpx.post(
            f"{base}/v1/sessions/b-session/turns",
            json={"messages": [{"role": "user", "content": "B's private task"}]},
            headers={"Authorization": f"Bearer {key_b}"},
        )
        assert r.status_code == 200, r.text
        yield Deployment(base, key_a, key_b)
    finally:
        api.stop()
        flush_prefix(redis_url, s.redis_prefix)
        log = (tmp / "api.log").read_text(errors="replace")
        assert "Traceback" not in log or "request.failed" not in log, log[-3000:]


def operations(invalid: bool) -> list[str]:
    """Every (METHOD path) of the app's own OpenAPI document, read without a server; for invalid data
    only those with something to get wrong (parameters or a body)."""
    from api.http.app import create_app
    from worker.settings import Settings

    paths = create_app(Settings()).openapi()["paths"]
    return sorted(
        f"{m.upper()} {p}"
        for p, ms in paths.items()
        for m, op in ms.items()
        if not invalid or op.get("parameters") or op.get("requestBody")
    )


CASES = [(GenerationMode.POSITIVE, op) for op in operations(False)] + [
    (GenerationMode.NEGATIVE, op) for op in operations(True)
]


def negative_data_rejection(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis' check, with a 413 also counted as refusing invalid data: a generated body past
    COMPACTD_MAX_REQUEST_BYTES is refused by the size limit before its schema is read."""
    if response.status_code == 413:
        return None
    return st_checks.negative_data_rejection(ctx, response, case)


CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_schema_conformance,
    negative_data_rejection,
]


def check_auth_and_isolation(deployment: Deployment, case: Any) -> None:
    """The same request without a key is 401; tenant B's session never answers tenant A with data."""
    if case.path in PUBLIC:
        return
    anonymous = case.call(base_url=deployment.base, headers={"Authorization": ""})
    assert anonymous.status_code == 401, (case.method, case.path, anonymous.status_code)
    if ("{sid}" in case.path and case.method.upper() != "POST") or case.path.endswith("/compact"):
        params = dict(case.path_parameters or {})
        params["sid"] = "b-session"
        case.path_parameters = params
        foreign = case.call(base_url=deployment.base, headers={"Authorization": f"Bearer {deployment.key_a}"})
        # 413: a generated body past the request-size limit is refused before any session is read
        assert foreign.status_code in (400, 404, 413, 415, 422), (case.method, case.path, foreign.status_code)
        assert "private task" not in foreign.text


def run_operation(deployment: Deployment, mode: GenerationMode, operation: str, examples: int) -> None:
    """Up to `examples` generated requests of one operation, each checked as tenant A, anonymously and against B's session."""
    schema = schemathesis.openapi.from_url(f"{deployment.base}/openapi.json")
    method, path = operation.split(" ", 1)

    @given(case=schema[path][method].as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: Any) -> None:
        case.call_and_validate(
            base_url=deployment.base, headers={"Authorization": f"Bearer {deployment.key_a}"}, checks=CHECKS
        )
        check_auth_and_isolation(deployment, case)

    run()


# schemathesis' pytest plugin does not run under pytest 9 (it reaches for a private attribute);
# its Hypothesis strategies do, one operation at a time
@pytest.mark.parametrize(("mode", "operation"), CASES, ids=[f"{m.value} {op}" for m, op in CASES])
def test_api_conforms_to_its_schema(deployment: Deployment, mode: GenerationMode, operation: str) -> None:
    """Generated valid and invalid requests: never a 5xx, always as documented, invalid data refused, auth never ignored."""
    run_operation(deployment, mode, operation, EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "operation"), CASES, ids=[f"{m.value} {op}" for m, op in CASES])
def test_api_conforms_to_its_schema_long(
    deployment: Deployment, mode: GenerationMode, operation: str
) -> None:
    """The same run with LONG_EXAMPLES (50) examples an operation (behind the slow marker)."""
    run_operation(deployment, mode, operation, LONG_EXAMPLES)


def test_schema_documents_every_route(deployment: Deployment) -> None:
    """The OpenAPI document the run works from is the app's own, with every /v1 route in it."""
    paths = set(httpx.get(f"{deployment.base}/openapi.json").json()["paths"])
    assert {"/v1/tools", "/v1/sessions/{sid}/turns", "/v1/sessions/{sid}/prompt"} <= paths
    assert Path(__file__).exists()
