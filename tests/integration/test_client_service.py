"""A real compactd for the client tests: `compactd api` and `compactd worker` processes on loopback.

Imported by test_client*.py, test_agent_loop.py and test_langgraph.py (no tests here). Each module
that imports the fixture gets a fixture definition of its own, so the processes are kept here and
started once per test run (every test uses session ids of its own). SQLite keeps start-up short;
the offload threshold is lowered so a small tool output becomes a virtual file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings


@dataclass(frozen=True)
class Service:
    url: str
    key: str
    api_log: Path


_running: list[Service] = []


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Service]:
    """One API and one worker process for the run (start-up is the slow part); stopped at its end."""
    if _running:
        yield _running[0]
        return
    tmp = tmp_path_factory.mktemp("compactd")
    key = f"cpd_{uuid.uuid4().hex}"
    port = free_port()
    settings = make_settings(
        tmp,
        f"sqlite:///{tmp / 'compactd.db'}",
        redis_url,
        port=port,
        default_api_key=key,
        offload_tokens=300,
        preview_tokens=50,
        idle_seconds=0.0,  # a /compact runs at once (no debounce before the quiet point)
    )
    api = Worker(settings, "api", log=tmp / "api.log")
    worker = Worker(settings, "worker", "--concurrency=1", log=tmp / "worker.log")
    try:
        api.wait_ready("api.started", timeout=120)
        worker.wait_ready(timeout=120)
        _running.append(Service(f"http://127.0.0.1:{port}", key, tmp / "api.log"))
        yield _running[0]
    finally:
        _running.clear()
        api.stop()
        worker.stop()
        flush_prefix(redis_url, settings.redis_prefix)
        redis.Redis.from_url(redis_url).delete(settings.queue)
