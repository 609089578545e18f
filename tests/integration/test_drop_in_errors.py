"""Every error of the drop-in endpoints, parsed by the real anthropic SDK: the route's own, the
middlewares' before it (body limit, auth, rate limit), an unknown path or method, an unreachable
upstream (named, never with its credentials), on /v1/messages and /v1/messages/count_tokens."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
import redis

from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings
from worker.store.db import make_engine, migrate
from worker.store.tenants import create_tenant

pytestmark = [pytest.mark.services]

LIMIT_BYTES = 64 * 1024
MODEL = "claude-sonnet-4-6"
ASK = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Api:
    url: str
    key: str
    limited_key: str  # a tenant of its own whose key runs into the rate limit
    closed_port: int
    log: Path
    clients: list[anthropic.Anthropic]  # closed when the module is done

    def sdk(self, key: str | None = None) -> anthropic.Anthropic:
        """The anthropic SDK pointed at compactd with `key` (the tenant's by default), no retries."""
        client = anthropic.Anthropic(base_url=self.url, api_key=key or self.key, max_retries=0)
        self.clients.append(client)
        return client


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Api]:
    """One `compactd api` process: a small body limit, a rate limit, and an upstream on a closed
    port whose URL carries a user, a password and a query."""
    tmp = tmp_path_factory.mktemp("dropin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    key = f"cpd_{uuid.uuid4().hex}"
    settings = make_settings(
        tmp,
        f"sqlite:///{tmp / 'compactd.db'}",
        redis_url,
        port=free_port(),
        default_api_key=key,
        upstream_url=f"http://someone:hunter2@127.0.0.1:{closed}/base?token=sekrit",
        max_request_bytes=LIMIT_BYTES,
        rate_limit_per_second=0.01,
        rate_limit_burst=20,
    )
    process = Worker(settings, "api", log=tmp / "api.log")
    try:
        process.wait_ready("api.started", timeout=120)
        engine = make_engine(settings.database_url)
        migrate(engine)
        limited = create_tenant(engine, "limited")[1]
        engine.dispose()
        made = Api(f"http://127.0.0.1:{settings.port}", key, limited, closed, tmp / "api.log", [])
        yield made
        for client in made.clients:
            client.close()
    finally:
        process.stop()
        flush_prefix(redis_url, settings.redis_prefix)
        redis.Redis.from_url(redis_url).delete(settings.queue)


def _raised(call: Any) -> anthropic.APIStatusError:
    with pytest.raises(anthropic.APIStatusError) as caught:
        call()
    return caught.value


def _anthropic_shaped(error: anthropic.APIStatusError, status: int, kind: str) -> str:
    """The SDK parsed the body as the Messages API's error: its status, type and message."""
    assert error.status_code == status, (error.status_code, error.body)
    assert error.type == kind, error.body
    assert isinstance(error.body, dict) and error.body["type"] == "error", error.body
    assert error.response.headers["content-type"].startswith("application/json")
    assert error.api_message
    return error.api_message


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_auth_and_bad_bodies_are_errors_the_sdk_parses(api: Api, path: str) -> None:
    """No key, a wrong key, a request that is not a Messages request: the SDK's own
    AuthenticationError and BadRequestError, with the Anthropic type."""
    sdk = api.sdk()
    counting = path.endswith("count_tokens")

    def send(client: anthropic.Anthropic, **body: Any) -> Any:
        if counting:
            return client.messages.count_tokens(**{k: v for k, v in body.items() if k != "max_tokens"})
        return client.messages.create(**body)

    nokey = sdk.with_options(
        default_headers={"x-api-key": anthropic.Omit(), "authorization": anthropic.Omit()}
    )
    error = _raised(lambda: send(nokey, **ASK))
    assert isinstance(error, anthropic.AuthenticationError)
    assert "compactd API key" in _anthropic_shaped(error, 401, "authentication_error")
    error = _raised(lambda: send(api.sdk("cpd_wrong"), **ASK))
    assert isinstance(error, anthropic.AuthenticationError)
    _anthropic_shaped(error, 401, "authentication_error")
    error = _raised(lambda: send(sdk, **{**ASK, "messages": []}))
    assert isinstance(error, anthropic.BadRequestError)
    assert "messages" in _anthropic_shaped(error, 400, "invalid_request_error")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_body_over_the_limit_is_a_413_the_sdk_parses(api: Api, path: str) -> None:
    """Past max_request_bytes the body limit answers before the route, declared (Content-Length)
    or streamed (chunked): in the Anthropic shape, request_too_large, with or without a key."""
    big = {**ASK, "messages": [{"role": "user", "content": "x" * (2 * LIMIT_BYTES)}]}
    for key in (api.key, "cpd_wrong"):
        client = api.sdk(key)
        error = _raised(lambda c=client: c.post(path, body=big, cast_to=object))
        assert isinstance(error, anthropic.APIStatusError) and error.status_code == 413
        assert str(LIMIT_BYTES) in _anthropic_shaped(error, 413, "request_too_large")

    def chunks() -> Iterator[bytes]:
        yield b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "'
        for _ in range(4):
            yield b"x" * LIMIT_BYTES
        yield b'"}]}'

    streamed = httpx.post(
        api.url + path,
        content=chunks(),
        headers={"x-api-key": api.key, "content-type": "application/json", "anthropic-version": "2023-06-01"},
    )
    assert streamed.status_code == 413 and streamed.headers["content-type"].startswith("application/json")
    assert streamed.json()["type"] == "error" and streamed.json()["error"]["type"] == "request_too_large"


def test_an_unknown_path_or_method_under_the_endpoint_is_anthropic_shaped(api: Api) -> None:
    """A 404 under /v1/messages/ and a GET of /v1/messages: what the SDK parses, not problem+json."""
    sdk = api.sdk()
    error = _raised(lambda: sdk.post("/v1/messages/nothing-here", body=ASK, cast_to=object))
    assert isinstance(error, anthropic.NotFoundError)
    _anthropic_shaped(error, 404, "not_found_error")
    error = _raised(lambda: sdk.get("/v1/messages", cast_to=object))
    _anthropic_shaped(error, 405, "invalid_request_error")
    # compactd's own API keeps answering problem+json
    own = httpx.get(api.url + "/v1/sessions")
    assert own.status_code == 401 and own.headers["content-type"] == "application/problem+json"


def test_an_unreachable_upstream_is_a_502_naming_it_without_credentials(api: Api) -> None:
    """The 502's message and the log line name the configured upstream (scheme, host, port, path),
    never its user, password or query; streaming or not, and a side request too."""
    sdk = api.sdk()
    conversation = [
        *ASK["messages"],
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "go"},
    ]
    shown = f"http://127.0.0.1:{api.closed_port}/base"
    for call in (
        lambda: sdk.messages.create(**ASK),  # a side request, passed through
        lambda: sdk.messages.create(**{**ASK, "messages": conversation}),
        lambda: sdk.messages.create(**{**ASK, "messages": conversation, "stream": True}),
        lambda: sdk.messages.count_tokens(model=MODEL, messages=ASK["messages"]),
    ):
        error = _raised(call)
        assert isinstance(error, anthropic.InternalServerError)
        message = _anthropic_shaped(error, 502, "api_error")
        assert shown in message and "COMPACTD_UPSTREAM_URL" in message
        assert not {"someone", "hunter2", "sekrit"} & set(message.replace("/", " ").replace(":", " ").split())
    logged = [line for line in api.log.read_text().splitlines() if "proxy.upstream_unreachable" in line]
    assert logged and all(shown in line for line in logged)
    assert not any(secret in api.log.read_text() for secret in ("hunter2", "sekrit"))


def test_the_rate_limit_is_a_429_the_sdk_parses(api: Api) -> None:
    """Past the key's burst: the SDK's RateLimitError, rate_limit_error, with retry-after."""
    client = api.sdk(api.limited_key)
    with pytest.raises(anthropic.RateLimitError) as caught:
        for _ in range(40):
            with pytest.raises(anthropic.BadRequestError):
                client.messages.create(**{**ASK, "messages": []})
    _anthropic_shaped(caught.value, 429, "rate_limit_error")
    assert int(caught.value.response.headers["retry-after"]) >= 1
