"""Private servers for tests that kill, freeze or restart them (never the shared 6379/5432 ones):
a redis-server and a PostgreSQL cluster of the test's own on a free loopback port."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import create_engine, text

from tests.conftest import require
from worker.store.db import normalize_url


def answers(host: str, port: int) -> bool:
    """Whether something accepts a TCP connection on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PG_URL = os.environ.get("COMPACTD_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.contextmanager
def private_schema() -> Iterator[str]:
    """A PostgreSQL schema of its own (dropped afterwards), as a URL selecting it."""
    schema = f"s_{uuid.uuid4().hex[:12]}"
    admin = create_engine(normalize_url(PG_URL))
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def stop(proc: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    """Terminate a process and reap it; one still running after `timeout` seconds is killed."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait(ok: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} within {timeout}s")


class PrivateRedis:
    """A redis-server of the test's own on a free loopback port, without persistence: killing and
    restarting it loses every key, as a broker restarted without AOF would."""

    def __init__(self, log: Path | None = None) -> None:
        binary = shutil.which("redis-server")
        require(binary is not None, "redis-server not installed (needed for a private Redis)")
        self.binary = str(binary)
        self.port = free_port()
        self.log = log
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        cmd += ["--appendonly", "no", "--protected-mode", "no"]
        cmd += ["--logfile", str(self.log)] if self.log else []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: answers("127.0.0.1", self.port), "redis-server answering")

    def signal(self, sig: int) -> None:
        """SIGSTOP freezes it (connections hang), SIGCONT resumes it."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no shutdown save, nothing kept; returns once the port is closed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a frozen server dies at once either way
            self.proc.kill()
            self.proc.wait()
        _wait(lambda: not answers("127.0.0.1", self.port), "redis-server port closed")

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (initdb into a temporary directory, trust auth on
    loopback), stopped and started with pg_ctl; run as the postgres user when we are root."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        require(bool(found), "PostgreSQL server binaries not installed (/usr/lib/postgresql/*/bin)")
        self.bin = Path(found[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="compactd-pg-"))
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.dir / "data"), "-o", options, "-l", str(self.dir / "log"), "-w", "start"
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A redis-server of this test's own, killed after it (its log in tmp_path/redis.log)."""
    server = PrivateRedis(tmp_path / "redis.log")
    yield server
    server.kill()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL cluster of this test's own, stopped and removed after it."""
    server = PrivatePostgres()
    yield server
    server.remove()
