"""docker-compose.yml has the production shape, and each of its processes runs directly as a `compactd` subcommand."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import REPO
from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings

COMPOSE = REPO / "docker-compose.yml"
SUBCOMMANDS = {"api", "worker", "beat", "flower"}


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_has_every_service_with_compactd_commands_and_healthchecks() -> None:
    """PostgreSQL, Redis, api, worker, beat and flower exist; ours run `compactd <subcommand>`; all have healthchecks."""
    services = compose()["services"]
    assert {"postgres", "redis", "api", "worker", "beat", "flower"} <= set(services)
    for name in SUBCOMMANDS:
        command = services[name]["command"]
        assert command[:2] == ["compactd", name], name
    for name in ("postgres", "redis", *SUBCOMMANDS):
        assert services[name]["healthcheck"]["test"], name
    assert Path(REPO / "Dockerfile").exists()


def test_compose_scales_api_and_workers_but_runs_exactly_one_beat() -> None:
    """API and workers have replicas; beat is pinned to one (two beats would double every schedule)."""
    services = compose()["services"]
    assert services["beat"]["deploy"]["replicas"] == 1
    assert "replicas" in services["api"]["deploy"] and "replicas" in services["worker"]["deploy"]


def test_compose_redis_keeps_data_and_never_evicts() -> None:
    """Redis runs with AOF and noeviction (the broker and cache must not silently lose keys)."""
    command = " ".join(compose()["services"]["redis"]["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command


def test_compose_shares_one_redaction_key_between_api_and_workers() -> None:
    """API, worker and beat get the same COMPACTD_REDACTION_KEY and the PostgreSQL/Redis URLs."""
    services = compose()["services"]
    for name in ("api", "worker", "beat"):
        env = services[name]["environment"]
        assert "COMPACTD_REDACTION_KEY" in env and env["COMPACTD_DATABASE_URL"].startswith("postgresql")
        assert env["COMPACTD_REDIS_URL"].startswith("redis://")


@pytest.mark.services
@pytest.mark.slow
def test_compose_processes_run_directly_against_postgres_and_redis(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """`compactd api`, `worker`, `beat` and `flower` start against PostgreSQL and Redis and answer."""
    api_port, flower_port = free_port(), free_port()
    key = f"cpd_{uuid.uuid4().hex}"
    settings = make_settings(tmp_path, pg_url, redis_url, port=api_port, default_api_key=key)
    procs = {
        "api": Worker(settings, "api", log=tmp_path / "api.log"),
        "worker": Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log"),
        "beat": Worker(settings, "beat", log=tmp_path / "beat.log"),
        "flower": Worker(settings, "flower", f"--port={flower_port}", log=tmp_path / "flower.log"),
    }
    try:
        procs["worker"].wait_ready()
        procs["beat"].wait_ready("beat: Starting")
        procs["api"].wait_ready("api.started")
        with httpx.Client(
            base_url=f"http://127.0.0.1:{api_port}", headers={"Authorization": f"Bearer {key}"}
        ) as http:
            assert http.get("/readyz").status_code == 200
            r = http.post("/v1/sessions/c/turns", json={"messages": [{"role": "user", "content": "hello"}]})
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 30
            while http.get("/v1/sessions/c").json()["compacted_through"] < 1:
                assert time.monotonic() < deadline, "the worker never published"
                time.sleep(0.2)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{flower_port}/healthcheck").text == "OK":
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()[-2000:]
            time.sleep(0.2)
    finally:
        for p in procs.values():
            p.stop()
        flush_prefix(redis_url, settings.redis_prefix)
