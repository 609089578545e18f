"""A process frozen inside a write transaction (SIGSTOP, a paused VM) cannot hold a session forever.

A real process takes the session's row lock the way a worker's publish does (an UPDATE of the
session row) and stops itself with SIGSTOP before it commits. On PostgreSQL, appends to that
session then answer 503 with Retry-After once the lock wait passes COMPACTD_DB_LOCK_TIMEOUT_SECONDS
(they do not hang), and once the frozen session has been idle in its transaction for
COMPACTD_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS the server rolls it back: the next append is stored,
and nothing of the frozen transaction remains.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.conftest import REPO
from tests.integration.conftest import make_settings, open_app, settings_env

pytestmark = pytest.mark.services

LOCK_TIMEOUT, IDLE_TIMEOUT = 1.0, 8.0
# the frozen writer, a process configured as compactd's are (COMPACTD_* from the environment): the
# session row locked as a publish locks it, then SIGSTOP before COMMIT
FREEZE = """
import os, signal, sys
from sqlalchemy import text
from worker.resources import engine_for
from worker.settings import Settings
engine = engine_for(Settings())
with engine.connect() as conn, conn.begin():
    conn.execute(text("UPDATE sessions SET version = version + 1000 WHERE id = :id"), {"id": int(sys.argv[1])})
    print("locked", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.fixture
def frozen_writer() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:  # resume it so it can die: its connection is gone, its transaction too
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.communicate(timeout=10)


def test_appends_outlive_a_writer_frozen_mid_transaction(
    tmp_path: Path, pg_url: str, redis_url: str, frozen_writer: list[subprocess.Popen[str]]
) -> None:
    """Appends behind a frozen writer answer 503 with Retry-After (bounded, not hung), then succeed
    by themselves once the server ends the frozen transaction; its update is rolled back."""
    settings = make_settings(
        tmp_path,
        pg_url,
        redis_url,
        db_lock_timeout_seconds=LOCK_TIMEOUT,
        db_idle_transaction_timeout_seconds=IDLE_TIMEOUT,
    )
    with open_app(settings) as api:
        client, res, auth = api.client, api.res, api.auth
        turn = {"messages": [{"role": "user", "content": "first"}]}
        assert client.post("/v1/sessions/s/turns", json=turn, headers=auth).status_code == 200
        with res.engine.connect() as conn:
            pk, version = conn.execute(text("SELECT id, version FROM sessions")).one()

        proc = subprocess.Popen(
            [sys.executable, "-c", FREEZE, str(pk)],
            cwd=REPO,
            env=settings_env(settings),
            stdout=subprocess.PIPE,
            text=True,
        )
        frozen_writer.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"

        started = time.monotonic()
        blocked = client.post(
            "/v1/sessions/s/turns",
            json={"messages": [{"role": "assistant", "content": "second"}]},
            headers=auth,
        )
        waited = time.monotonic() - started
        assert blocked.status_code == 503, blocked.text
        assert (
            blocked.headers["Retry-After"] and blocked.headers["content-type"] == "application/problem+json"
        )
        assert (
            blocked.json()["detail"] == "the session is locked by another writer; nothing was stored, retry"
        )
        assert waited < IDLE_TIMEOUT, waited  # it gave up at the lock timeout, not at the server's kill

        stored = None
        deadline = started + IDLE_TIMEOUT + 12  # well short of the 30 s default: the setting must reach it
        while stored is None and time.monotonic() < deadline:
            r = client.post(
                "/v1/sessions/s/turns",
                json={"messages": [{"role": "assistant", "content": "second"}]},
                headers=auth,
            )
            if r.status_code == 200:
                stored = r
            else:
                assert r.status_code == 503, r.text
                time.sleep(float(r.headers["Retry-After"]) / 4)
        assert stored is not None, "the frozen transaction was never ended"
        with res.engine.connect() as conn:
            seqs = conn.execute(text("SELECT seq FROM turns ORDER BY seq")).scalars().all()
            after = conn.execute(text("SELECT version FROM sessions WHERE id = :id"), {"id": pk}).scalar()
        assert seqs == [1, 2]
        assert version < after < version + 1000  # the frozen UPDATE was rolled back; the append's stands
