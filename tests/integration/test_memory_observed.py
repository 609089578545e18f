"""Observed working memory end to end: a real Celery worker on PostgreSQL and Redis observes the turns."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, inspect, text

from api.http.app import create_app
from tests.factories import result
from tests.integration.conftest import Worker, flush_prefix, make_settings, wait_for
from tests.unit.test_memory_observe import PYTEST_FAIL, bash, unit
from worker.compaction.model import Turn
from worker.flows.observe import observe_memory
from worker.memory.model import Change
from worker.resources import Resources
from worker.settings import Settings
from worker.store import memory, sessions
from worker.store.db import migrate, write_tx
from worker.store.tables import utcnow
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


def _session(engine: Engine) -> int:
    tid, _ = create_tenant(engine, "t")
    turn = Turn(seq=0, role="user", content=({"type": "text", "text": "go"},))  # type: ignore[arg-type]
    sessions.append_turns(engine, tid, "s", [turn])
    return cast(int, sessions.get_session(engine, tid, "s").id)


def _watermark(engine: Engine, pk: int) -> int:
    return cast(int, sessions.get_session_by_pk(engine, pk).memory_observed_through)


def _res(engine: Engine) -> Resources:
    return cast(Resources, SimpleNamespace(engine=engine))


def test_observing_refreshes_the_items_the_turns_mention_and_leaves_the_agents_values(engine: Engine) -> None:
    """The agent's file and blocker, read and run again, get a new referenced_at (so the nightly
    prune keeps them) but keep their value and origin; an item not mentioned keeps its old time."""
    pk = _session(engine)
    old = utcnow() - timedelta(days=20)
    agent = [
        Change("add", "important_files", "src/a.py"),
        Change("add", "blockers", "my note", key="pytest -q"),
        Change("set", "notes", "v", key="k"),
    ]
    memory.change(engine, pk, agent, origin="agent", now=old)
    turns = [
        *unit(1, "r", "Read", "code", file_path="src/a.py"),
        *bash(3, "pytest -q 2>&1", PYTEST_FAIL, is_error=True),
    ]
    assert observe_memory(_res(engine), pk, turns, 0) == 0
    items = {i.key: i for i in memory.load(engine, pk)}
    assert items["src/a.py"].referenced_at > old and items["pytest -q"].referenced_at > old
    assert items["k"].referenced_at == old
    assert (items["pytest -q"].value, items["pytest -q"].origin) == ("my note", "agent")
    assert _watermark(engine, pk) == 4


def test_setting_the_same_value_again_persists_referenced_at_without_a_version(engine: Engine) -> None:
    """A no-op set records no event and bumps no version, but its referenced_at is stored."""
    pk = _session(engine)
    old = utcnow() - timedelta(days=20)
    version, _ = memory.change(engine, pk, [Change("set", "task", "t")], origin="agent", now=old)
    later = old + timedelta(days=10)
    assert memory.change(engine, pk, [Change("set", "task", "t")], origin="agent", now=later) == (version, ())
    assert memory.load(engine, pk)[0].referenced_at == later and len(memory.history(engine, pk)) == 1


def test_an_agent_write_between_observing_and_recording_wins(engine: Engine) -> None:
    """The observer read an observed blocker; the agent rewrote it meanwhile: the observer's change to
    it is skipped against the items read in the recording transaction, and the turns count as observed."""
    pk = _session(engine)
    memory.change(engine, pk, [Change("add", "blockers", "1 failed", key="pytest -q")], origin="observed")
    groups = [("observed in turn 9", [Change("set", "blockers", "2 failed", key="pytest -q")])]
    memory.change(engine, pk, [Change("set", "blockers", "mine", key="pytest -q")], origin="agent")
    done = memory.record_observed(engine, pk, groups, seen=0, through=9)
    assert done is not None and done.events == ()
    [item] = memory.load(engine, pk)
    assert (item.value, item.origin) == ("mine", "agent") and _watermark(engine, pk) == 9


def test_a_refused_group_does_not_block_the_others_and_the_watermark_moves_once(engine: Engine) -> None:
    """One group cannot apply: the others do, with the watermark, in one transaction; a second
    recording of the same range (another job) writes nothing."""
    pk = _session(engine)
    groups = [
        ("observed in turn 2", [Change("resolve", "blockers", key="gone")]),
        ("observed in turn 3", [Change("set", "task", "t", seq=3)]),
    ]
    done = memory.record_observed(engine, pk, groups, seen=0, through=3)
    assert done is not None and [r for r, _ in done.refused] == ["observed in turn 2"]
    assert [(e.section, e.reason) for e in done.events] == [("task", "observed in turn 3")]
    assert memory.record_observed(engine, pk, [groups[1]], seen=0, through=3) is None
    assert _watermark(engine, pk) == 3 and len(memory.history(engine, pk)) == 1


def test_a_crash_while_recording_leaves_the_turns_to_be_observed_again(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watermark moves in the transaction that writes the changes: a failure rolls back both."""
    pk = _session(engine)
    turns = bash(1, "pytest -q", PYTEST_FAIL, is_error=True)

    def crash(*_: Any) -> None:
        raise RuntimeError("worker killed")

    with monkeypatch.context() as m:
        m.setattr(memory, "_write_events", crash)
        with pytest.raises(RuntimeError):
            observe_memory(_res(engine), pk, turns, 0)
    assert _watermark(engine, pk) == 0 and memory.load(engine, pk) == []
    assert observe_memory(_res(engine), pk, turns, 0) == 1
    assert _watermark(engine, pk) == 2 and [i.key for i in memory.load(engine, pk)] == ["pytest -q"]
