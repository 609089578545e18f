"""A real compactd whose upstream is a FakeMessagesAPI: for the drop-in endpoint's tests (no tests here).

The fake runs in the test process (its script and recorded requests are the test's to read); the
API and one worker run as processes configured with COMPACTD_UPSTREAM_URL pointing at it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.openai_api import OpenAIStandIn
from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings
from worker.settings import Settings

PROVIDER_KEY = "sk-ant-api03-" + "Zx9" * 30 + "AA"  # the key compactd holds for the upstream
OPENAI_PROVIDER_KEY = "sk-proj-" + "Qr7" * 30  # and for the OpenAI-compatible one


@dataclass
class Proxy:
    url: str
    key: str
    upstream: FakeMessagesAPI
    settings: Settings
    api_log: Path
    openai: OpenAIStandIn | None = None

    def client(self, **kwargs: Any) -> Any:
        """The anthropic SDK pointed at compactd: only base_url and the key differ from normal use."""
        import anthropic

        kwargs.setdefault("max_retries", 0)
        return anthropic.Anthropic(base_url=self.url, api_key=self.key, **kwargs)


def start_proxy(
    tmp: Path, redis_url: str, database_url: str | None = None, **overrides: Any
) -> Iterator[Proxy]:
    fake = FakeMessagesAPI().start()
    openai_upstream = overrides.pop("openai", None)
    if openai_upstream is not None:
        overrides["openai_upstream_url"] = openai_upstream.base_url
    key = f"cpd_{uuid.uuid4().hex}"
    port = free_port()
    values: dict[str, Any] = {"offload_tokens": 300, "preview_tokens": 50, "idle_seconds": 0.0, **overrides}
    settings = make_settings(
        tmp,
        database_url or f"sqlite:///{tmp / 'compactd.db'}",
        redis_url,
        port=port,
        default_api_key=key,
        upstream_url=fake.base_url,
        **values,
    )
    env_extra = {
        "COMPACTD_UPSTREAM_API_KEY": PROVIDER_KEY,
        "COMPACTD_OPENAI_UPSTREAM_API_KEY": OPENAI_PROVIDER_KEY,
    }
    api = Worker(settings, "api", log=tmp / "api.log", env=env_extra)
    worker = Worker(settings, "worker", "--concurrency=1", log=tmp / "worker.log", env=env_extra)
    try:
        api.wait_ready("api.started", timeout=120)
        worker.wait_ready(timeout=120)
        yield Proxy(f"http://127.0.0.1:{port}", key, fake, settings, tmp / "api.log", openai_upstream)
    finally:
        api.stop()
        worker.stop()
        fake.stop()
        flush_prefix(redis_url, settings.redis_prefix)
        redis.Redis.from_url(redis_url).delete(settings.queue)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Proxy]:
    """compactd (API + worker, SQLite) in front of a fake upstream, for the module."""
    yield from start_proxy(tmp_path_factory.mktemp("proxy"), redis_url)


@pytest.fixture(scope="module")
def openai_proxy(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Proxy]:
    """compactd (API + worker, SQLite) in front of an OpenAI stand-in (and the Messages fake)."""
    with OpenAIStandIn() as api:
        yield from start_proxy(tmp_path_factory.mktemp("openai-proxy"), redis_url, openai=api)
