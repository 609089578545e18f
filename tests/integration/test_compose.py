"""docker-compose.yml has the production shape, and each of its processes runs directly as a `compactd` subcommand."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import REPO, require
from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings
from worker.settings import Settings

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


CREDENTIAL = re.compile(r"PASSWORD|SECRET|_KEY$|AUTH|TOKEN")
REQUIRED = re.compile(r"\$\{([A-Z0-9_]+):\?[^}]*\}")


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    return env if isinstance(env, dict) else dict(item.split("=", 1) for item in env)


def test_compose_takes_every_credential_from_the_environment() -> None:
    """No password, key or secret is written in the file: each is a ${VAR:?...} (required) or ${VAR:-} (optional, empty)."""
    services = compose()["services"]
    for name, service in services.items():
        for var, value in _environment(service).items():
            if CREDENTIAL.search(var):
                assert re.fullmatch(r"\$\{[A-Z0-9_]+(:\?[^}]*|:-)\}", str(value)), (name, var, value)
    for name in ("api", "worker", "beat"):
        env = _environment(services[name])
        assert "${POSTGRES_PASSWORD:?" in env["COMPACTD_DATABASE_URL"], name
        assert "${REDIS_PASSWORD:?" in env["COMPACTD_REDIS_URL"], name
    assert "--requirepass" in " ".join(services["redis"]["command"])
    text = COMPOSE.read_text()
    assert not re.search(r"(?i)password[=:]\s*['\"]?compactd", text)


def test_env_example_names_every_required_variable() -> None:
    """.env.example lists each variable compose refuses to start without, with no value filled in."""
    example = (REPO / ".env.example").read_text()
    given = dict(
        line.split("=", 1) for line in example.splitlines() if line.strip() and not line.startswith("#")
    )
    required = set(REQUIRED.findall(COMPOSE.read_text()))
    assert required >= {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "COMPACTD_REDACTION_KEY", "FLOWER_BASIC_AUTH"}
    assert required <= set(given)
    assert all(given[name] == "" for name in required)


def test_compose_gives_every_compactd_process_one_redaction_profile() -> None:
    """COMPACTD_REDACTION reaches the API, the workers and beat alike (an API redacting under one
    profile and a worker under another would store mixed histories), and .env.example names it."""
    services = compose()["services"]
    compactd = [n for n, svc in services.items() if svc.get("image") == "compactd:latest"]
    assert {"api", "worker", "beat"} <= set(compactd)
    for name in compactd:
        assert _environment(services[name])["COMPACTD_REDACTION"] == "${COMPACTD_REDACTION:-standard}", name
    assert "\nCOMPACTD_REDACTION=standard\n" in (REPO / ".env.example").read_text()


def test_compose_publishes_operator_uis_on_loopback_behind_auth() -> None:
    """Only the load balancer is published on every interface; Flower and Prometheus bind 127.0.0.1, and Flower asks for basic auth."""
    services = compose()["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            if name != "lb":
                assert str(port).startswith("127.0.0.1:"), (name, port)
    assert _environment(services["flower"])["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")


def test_compose_puts_one_health_checked_balancer_in_front_of_the_api_replicas() -> None:
    """Clients get one URL: a maintained nginx image publishes one port, waits for a healthy API, checks
    itself and an API replica through itself, and re-resolves `api` so a scale-out is picked up; the
    replicas publish nothing."""
    services = compose()["services"]
    lb, api = services["lb"], services["api"]
    assert lb["image"].startswith(("nginx:", "nginxinc/nginx-unprivileged:"))
    assert lb["ports"] == ["${COMPACTD_PORT:-8700}:8700"]
    assert lb["depends_on"]["api"]["condition"] == "service_healthy"
    probe = " ".join(lb["healthcheck"]["test"])
    assert "/lb-healthz" in probe and "/healthz" in probe.replace("/lb-healthz", "")
    assert "ports" not in api and api["expose"] == ["8700"]
    (mount,) = lb["volumes"]
    conf = (REPO / mount.split(":")[0]).read_text()
    assert re.search(r"server api:8700 resolve", conf) and "resolver 127.0.0.11" in conf
    assert "proxy_buffering off" in conf  # /v1/messages streams through it
    size = re.search(r"client_max_body_size (\d+)m;", conf)
    assert size and int(size.group(1)) * 2**20 > Settings().max_request_bytes  # the API, not nginx, says 413


def test_every_container_runs_as_an_unprivileged_user() -> None:
    """Each service names a non-root user, and the image's last USER is not root."""
    for name, service in compose()["services"].items():
        user = str(service.get("user", "root"))
        assert user.split(":")[0] not in ("root", "0"), name
    users = [
        line.split()[1] for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("USER ")
    ]
    assert users and users[-1] not in ("root", "0")


def compose_cli() -> list[str] | None:
    """`docker compose` (the v2 plugin) or Debian's `docker-compose` (v1): either validates the file
    without an engine."""
    if (
        shutil.which("docker")
        and not subprocess.run(["docker", "compose", "version"], capture_output=True).returncode
    ):
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def test_docker_compose_config_refuses_to_run_without_credentials(tmp_path: Path) -> None:
    """`docker compose config` (no engine needed) accepts the file with the variables set and names the missing one without them."""
    cli = compose_cli()
    require(
        cli is not None,
        "neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose)",
    )
    assert cli is not None
    base = {k: v for k, v in os.environ.items() if k not in REQUIRED.findall(COMPOSE.read_text())}
    config = [*cli, "-f", str(COMPOSE), "--project-directory", str(tmp_path), "config", "-q"]
    missing = subprocess.run(config, env=base, capture_output=True, text=True)
    assert missing.returncode != 0 and "set " in missing.stderr
    filled = {name: "x" for name in REQUIRED.findall(COMPOSE.read_text())}
    assert subprocess.run(config, env={**base, **filled}, capture_output=True, text=True).returncode == 0


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
