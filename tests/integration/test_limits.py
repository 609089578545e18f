"""Request limits over real Redis and SQLite: per-turn size, malformed JSON, Content-Type, per-key rate limits, no echoed input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.http.middleware.json_only import media_type_problem
from tests.integration.conftest import AppClient, make_settings, open_app
from tests.integration.conftest import assert_problem as problem

pytestmark = pytest.mark.services
MARKER = "okapi-narwhal-9183"  # in every request body below; must never come back


def make_client(tmp_path: Path, redis_url: str, **overrides: Any) -> Iterator[AppClient]:
    with open_app(
        make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url, **overrides)
    ) as client:
        yield client


@pytest.fixture
def api(tmp_path: Path, redis_url: str) -> Iterator[AppClient]:
    yield from make_client(tmp_path, redis_url, max_turn_bytes=2_000)


def assert_problem(r: Any, status: int) -> dict[str, Any]:
    return problem(r, status, MARKER)


def test_a_turn_over_the_limit_is_413_naming_its_index_and_nothing_is_stored(api: AppClient) -> None:
    """The second message over max_turn_bytes: 413 naming messages[1] and the limit; the session is never created."""
    messages = [
        {"role": "user", "content": "short"},
        {"role": "assistant", "content": MARKER * 200},
    ]
    body = assert_problem(api.post("/v1/sessions/s/turns", json={"messages": messages}), 413)
    assert "messages[1]" in body["detail"] and "2,000 bytes" in body["detail"]
    assert body["index"] == 1 and body["max_turn_bytes"] == 2_000
    assert_problem(api.get("/v1/sessions/s"), 404)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b'{"messages": [' + MARKER.encode(), "line 1, column"),
        (
            b'{\n  "messages": [\n    {"role": "user", "content": "' + MARKER.encode() + b'"},,\n]}',
            "line 3, column 55",
        ),
        (b"{'messages': '" + MARKER.encode() + b"'}", "line 1, column 2"),
    ],
)
def test_malformed_json_is_400_saying_so_and_where(api: AppClient, raw: bytes, where: str) -> None:
    """A body that is not JSON: 400 "Malformed JSON" with the line and column, never the body itself."""
    r = api.post("/v1/sessions/s/turns", content=raw, headers={"content-type": "application/json"})
    body = assert_problem(r, 400)
    assert (
        body["title"] == "Malformed JSON" and "not valid JSON" in body["detail"] and where in body["detail"]
    )
    assert_problem(api.get("/v1/sessions/s"), 404)


@pytest.mark.parametrize(
    ("content_type", "named"),
    [
        (None, "no Content-Type"),
        ("text/plain", "got text/plain"),
        ("application/x-www-form-urlencoded", "got"),
    ],
)
def test_a_body_without_a_json_content_type_is_415_naming_the_header(
    api: AppClient, content_type: str | None, named: str
) -> None:
    """A JSON body sent without Content-Type, or with another one: 415 naming Content-Type; nothing stored."""
    raw = b'{"messages": [{"role": "user", "content": "' + MARKER.encode() + b'"}]}'
    headers = {"content-type": content_type} if content_type else {}
    r = api.client.post(
        "/v1/sessions/s/turns", content=raw, headers={"Authorization": f"Bearer {api.key}", **headers}
    )
    if content_type is None:
        # httpx adds no Content-Type for raw content: check it really went without one
        assert "content-type" not in r.request.headers
    body = assert_problem(r, 415)
    assert "Content-Type: application/json" in body["detail"] and named in body["detail"]
    assert_problem(api.get("/v1/sessions/s"), 404)
    # a JSON flavour with parameters is fine
    ok = api.post(
        "/v1/sessions/s/turns", content=raw, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert ok.status_code == 200, ok.text


@given(st.binary(max_size=80))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_media_type_problems_never_echo_an_unreadable_header(value: bytes) -> None:
    """Whatever the Content-Type header holds, the message names it only when it reads as a media type."""
    problem = media_type_problem(value, True)
    if problem is not None and "got an unreadable value" not in problem:
        shown = problem.rsplit("(got ", 1)[1].rstrip(")")
        assert len(shown) <= 101 and "/" in shown and " " not in shown


@pytest.fixture
def limited(tmp_path: Path, redis_url: str) -> Iterator[AppClient]:
    yield from make_client(tmp_path, redis_url, rate_limit_per_second=2.0, rate_limit_burst=5)


def test_rate_limits_are_per_key_and_leave_other_tenants_alone(limited: AppClient) -> None:
    """Tenant A hammered past its bucket gets 429 with Retry-After; tenant B's requests, interleaved, all succeed."""
    a, b = [], []
    for i in range(30):
        a.append(
            limited.get(
                "/v1/tools",
            )
        )
        if i % 6 == 0:
            # B stays within its own bucket: only A's hammering could refuse it
            b.append(limited.get("/v1/tools", key=limited.other_key).status_code)
    statuses = [r.status_code for r in a]
    assert statuses[:5] == [200] * 5 and 429 in statuses
    refused = next(r for r in a if r.status_code == 429)
    body = assert_problem(refused, 429)
    assert int(refused.headers["Retry-After"]) >= 1 and body["retry_after_seconds"] >= 1
    assert b == [200] * 5


def test_an_unknown_key_is_401_even_past_the_rate_limit(limited: AppClient) -> None:
    """Rate limits never turn a bad key into anything but 401."""
    for _ in range(10):
        r = limited.client.get("/v1/tools", headers={"Authorization": "Bearer cpd_nope"})
        assert_problem(r, 401)
