"""`compactd up`, `api` and `worker` as a user starts them: where they listen, what they print."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.integration.conftest import Worker, free_port, make_settings, wait_for

pytestmark = pytest.mark.services


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else is listening on."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        yield held.getsockname()[1]


def compactd(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api.cli.command", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def bare_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTD_")}
    env.update({"COMPACTD_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": str(REPO)})
    return env


@pytest.mark.parametrize("command", ["up", "api"])
@pytest.mark.parametrize("how", ["option", "setting"])
def test_a_busy_port_fails_fast_in_one_line(tmp_path: Path, busy_port: int, command: str, how: str) -> None:
    """A port in use (from --port or COMPACTD_PORT) is one line naming it and what to change, before anything starts."""
    env = bare_env(tmp_path)
    args = [command, "--port", str(busy_port)] if how == "option" else [command]
    if how == "setting":
        env["COMPACTD_PORT"] = str(busy_port)
    done = compactd(tmp_path, env, *args)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"compactd: port {busy_port} on 127.0.0.1 is already in use; choose another with --port or COMPACTD_PORT"
    ]
    assert not (tmp_path / "var" / "redis.sock").exists()


def test_api_listens_on_the_port_option_over_the_setting(tmp_path: Path, redis_url: str) -> None:
    """`compactd api --host H --port P` serves on H:P even when COMPACTD_PORT names another port."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url, port=free_port())
    port = free_port()
    api = Worker(settings, "api", "--host", "127.0.0.1", "--port", str(port), log=tmp_path / "api.log")
    try:
        wait_for(lambda: _healthy(port), 30)
        assert not _healthy(settings.port)
    finally:
        api.stop()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_worker_reports_superuser_privileges_in_one_line(tmp_path: Path, redis_url: str) -> None:
    """Celery's multi-line SecurityWarning banner becomes one line naming the user, and only as a superuser."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url)
    worker = Worker(settings, "worker", "--pool", "solo", log=tmp_path / "worker.log")
    worker.wait_ready()
    worker.stop()
    log = worker.log.read_text()
    notes = [line for line in log.splitlines() if "superuser privileges" in line]
    assert "SecurityWarning" not in log and "--uid option" not in log
    if os.geteuid() == 0:
        assert len(notes) == 1 and notes[0].startswith(
            "compactd worker: running with superuser privileges (uid=0"
        )
