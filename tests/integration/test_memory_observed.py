"""Observed working memory end to end: a real Celery worker on PostgreSQL and Redis observes the turns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, inspect, text

from api.app import create_app
from tests.integration.conftest import Worker, flush_prefix, make_settings, wait_for
from worker.resources import Resources
from worker.settings import Settings
from worker.store import sessions
from worker.store.db import migrate, write_tx
from worker.store.tenants import create_tenant

pytestmark = [pytest.mark.services, pytest.mark.slow]

FAILED = (
    "Exit code 1\n____ test_empty ____\nE   AssertionError: assert parse('') == []\n"
    "=== short test summary info ===\nFAILED tests/test_app.py::test_empty - AssertionError\n"
    "=== 1 failed, 4 passed in 0.31s ==="
)
PASSED = "===== 5 passed in 0.29s ====="


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, pg_url: str) -> Iterator[Settings]:
    s = make_settings(tmp_path, pg_url, redis_url)
    yield s
    flush_prefix(redis_url, s.redis_prefix)


@pytest.fixture
def worker(settings: Settings, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log")
    w.wait_ready()
    yield w
    w.stop()


def call(tid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": name, "input": args}]}


def result(tid: str, body: str, *, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": body}
    if is_error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


def test_the_worker_observes_an_edit_and_a_failing_then_passing_test(
    settings: Settings, worker: Worker
) -> None:
    """After the jobs, GET memory shows the edited file, the last edit's diff, the task, and the pytest blocker resolved."""
    res = Resources.build(settings)
    tenant, key = create_tenant(res.engine, "observer")
    auth = {"Authorization": f"Bearer {key}"}
    pytest_cmd = "pytest tests/test_app.py -q"
    steps = [
        [{"role": "user", "content": "Fix the empty-input bug in src/app.py. Keep the API stable."}],
        [
            call(
                "e1",
                "Edit",
                file_path="src/app.py",
                old_string="    return x\n",
                new_string="    return x or []\n",
            )
        ],
        [result("e1", "The file src/app.py has been updated.")],
        [call("b1", "Bash", command=f"cd /repo && {pytest_cmd} 2>&1")],
        [result("b1", FAILED, is_error=True)],
    ]
    try:
        with TestClient(create_app(settings)) as client:

            def memory() -> dict[str, Any]:
                r = client.get("/v1/sessions/obs/memory", headers=auth)
                assert r.status_code == 200, r.text
                return r.json()

            def blocker(m: dict[str, Any]) -> dict[str, Any] | None:
                return next((b for b in m["sections"]["blockers"] if b["key"] == pytest_cmd), None)

            for n, messages in enumerate(steps):
                r = client.post("/v1/sessions/obs/turns", json={"messages": messages}, headers=auth)
                assert r.status_code == 200, (n, r.text)
            opened = wait_for(lambda: (b := blocker(memory())) is not None and b, 60)
            assert opened["status"] == "open" and opened["origin"] == "observed"
            assert "FAILED tests/test_app.py::test_empty" in opened["value"]
            for messages in ([call("b2", "Bash", command=pytest_cmd)], [result("b2", PASSED)]):
                assert (
                    client.post(
                        "/v1/sessions/obs/turns", json={"messages": messages}, headers=auth
                    ).status_code
                    == 200
                )
            wait_for(lambda: (b := blocker(memory())) is not None and b["status"] == "resolved", 60)
            m = memory()
        files = {f["key"]: f for f in m["sections"]["important_files"]}
        assert files["src/app.py"]["value"] == "src/app.py — edited 1×"
        assert files["src/app.py"]["origin"] == "observed" and files["src/app.py"]["source_seq"] == 3
        assert (
            m["sections"]["task"][0]["value"] == "Fix the empty-input bug in src/app.py. Keep the API stable."
        )
        last = m["sections"]["last_edit"][0]["value"]
        assert last.startswith("src/app.py (Edit)") and "+    return x or []" in last
        assert sessions.get_session(res.engine, tenant, "obs").memory_observed_through == 7
        assert "memory.observed" in worker.log.read_text()
    finally:
        res.close()


def test_migration_5_adds_the_watermark_to_an_older_database(engine: Engine) -> None:
    """A database at schema 4 (no memory_observed_through) gains the column, and migrating again is a no-op."""
    with write_tx(engine) as conn:
        conn.execute(text("ALTER TABLE sessions DROP COLUMN memory_observed_through"))
        conn.execute(text("UPDATE schema_version SET version = 4"))
    migrate(engine)
    migrate(engine)
    with engine.connect() as conn:
        assert "memory_observed_through" in {c["name"] for c in inspect(conn).get_columns("sessions")}
