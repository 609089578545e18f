"""Nightly memory pruning for real: removals recorded and restorable, gone sessions' memory swept,
`compactd prune`, and the beat schedule running it exactly once per period with two beats up."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert

from tests.conftest import REPO
from tests.integration.conftest import Worker, flush_prefix, make_settings, settings_env, wait_for
from worker.cache.runs import Runs
from worker.compaction.model import Turn
from worker.flows import prune as pruning
from worker.memory.model import Change
from worker.memory.prune import period
from worker.resources import Resources
from worker.settings import Settings
from worker.store import memory, sessions, snapshots
from worker.store.db import write_tx
from worker.store.tables import MemoryEntry, utcnow
from worker.store.tenants import create_tenant

pytestmark = [pytest.mark.services]

PERIOD_SECONDS = 2.0


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_url: str) -> Iterator[Settings]:
    s = make_settings(tmp_path, database_url, redis_url, sweep_seconds=3600.0)
    yield s
    flush_prefix(redis_url, s.redis_prefix)


@pytest.fixture
def res(settings: Settings) -> Iterator[Resources]:
    r = Resources.build(settings)
    yield r
    r.close()


def session_with_memory(res: Resources, sid: str = "s") -> int:
    """A session whose memory holds one item for every rule, and two that stay."""
    tid = create_tenant(res.engine, f"prune-{sid}")[0]
    turn = Turn(seq=0, role="user", content=({"type": "text", "text": "fix the login test"},), tokens=5)  # type: ignore[arg-type]
    pk = sessions.append_turns(res.engine, tid, sid, [turn]).session_pk
    old = utcnow() - timedelta(days=30)
    memory.change(
        res.engine,
        pk,
        [
            Change("set", "task", "fix the login test"),
            Change("add", "blockers", "pytest tests/test_login.py fails", key="pytest tests/test_login.py"),
            Change("add", "decisions", "use bcrypt for password hashes", key="bcrypt-old"),
            Change("add", "notes", "ask about the staging database", key="stale"),
        ],
        origin="agent",
        now=old,
    )
    memory.change(
        res.engine,
        pk,
        [
            Change("add", "decisions", "Use bcrypt for password hashes.", key="bcrypt"),
            Change("resolve", "blockers", key="pytest tests/test_login.py"),
            Change("add", "notes", "the CI runs on python 3.11", key="ci", pinned=True),
        ],
        origin="agent",
    )
    return pk


def test_prune_records_each_removal_with_its_reason_and_it_can_be_restored(res: Resources) -> None:
    """A prune removes the resolved blocker, the older duplicate and the stale note, each recorded
    with origin prune and its reason; a second prune does nothing; a removal restores."""
    pk = session_with_memory(res)
    report = pruning.prune_now(res)
    assert (report["sessions"], report["removed"], report["merged"]) == (1, 2, 1)
    left = {(i.section, i.key) for i in memory.load(res.engine, pk)}
    assert left == {("task", "task"), ("decisions", "bcrypt"), ("notes", "ci")}
    pruned = {r.event.key: r for r in memory.history(res.engine, pk) if r.event.origin == "prune"}
    assert {k: r.event.reason for k, r in pruned.items()} == {
        "pytest tests/test_login.py": "resolved blocker",
        "bcrypt-old": "near-duplicate of bcrypt",
        "stale": f"not referenced since {(utcnow() - timedelta(days=30)):%Y-%m-%d}",
    }
    assert pruning.prune_now(res)["removed"] == 0
    assert pruning.prune_plans(res) == []
    memory.restore(res.engine, pk, pruned["stale"].id, origin="user")
    assert ("notes", "stale") in {(i.section, i.key) for i in memory.load(res.engine, pk)}


def test_an_item_changed_after_the_plan_is_not_pruned(
    res: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan is read first; an agent that reopens the blocker and a reference to the stale note
    land before it applies: both stay (skipped, checked in the write), the merge still happens."""
    pk = session_with_memory(res)
    plans = pruning.prune_plans(res)
    memory.change(
        res.engine,
        pk,
        [Change("add", "blockers", "pytest tests/test_login.py fails", key="pytest tests/test_login.py")],
        origin="agent",
    )
    # the agent sets the note to the value it has: no event, but the item counts as referenced now
    memory.change(
        res.engine,
        pk,
        [Change("set", "notes", "ask about the staging database", key="stale")],
        origin="agent",
    )
    monkeypatch.setattr(pruning, "prune_plans", lambda *_: plans)
    report = pruning.prune_now(res)
    assert (report["sessions"], report["removed"], report["merged"]) == (1, 0, 1)
    left = {(i.section, i.key): i.status for i in memory.load(res.engine, pk)}
    assert left[("blockers", "pytest tests/test_login.py")] == "open"
    assert ("notes", "stale") in left
    assert ("decisions", "bcrypt-old") not in left
    pruned = [r.event.key for r in memory.history(res.engine, pk) if r.event.origin == "prune"]
    assert pruned == ["bcrypt-old"]


def test_a_pruned_session_is_republished(res: Resources) -> None:
    """Pruning leaves the session's served prompt as it is (its next user turn notes the change, as
    for a memory change through the API) and sends a compaction at the new memory version; an
    unpruned session is left alone."""
    pk = session_with_memory(res)
    tid = sessions.get_session_by_pk(res.engine, pk).tenant_id
    turn = Turn(seq=0, role="user", content=({"type": "text", "text": "hi"},), tokens=1)  # type: ignore[arg-type]
    untouched = sessions.append_turns(res.engine, tid, "untouched", [turn]).session_pk
    memory.change(res.engine, untouched, [Change("set", "task", "say hi")], origin="agent")
    keys = [
        res.cache.prompts.key(pk),
        f"{res.settings.redis_prefix}pending:{pk}",
        res.cache.prompts.key(untouched),
    ]
    for key in keys:
        res.cache.client.set(key, b"cached")
    sent: list[tuple[int, int, int]] = []
    report = pruning.prune_now(res, enqueue=lambda t, s, v: sent.append((t, s, v)))
    assert report["sessions"] == 1
    assert sent == [(tid, pk, memory.version_of(res.engine, pk))]
    assert [bool(res.cache.client.exists(k)) for k in keys] == [True, True, True]


def test_memory_of_gone_sessions_is_swept(res: Resources) -> None:
    """Memory rows left by a session that no longer exists are deleted by the prune and counted."""
    keep = session_with_memory(res, "kept")
    tid = create_tenant(res.engine, "ghost")[0]
    row = {"tenant_id": tid, "scope": "", "section": "notes", "key": "k", "value": "v", "origin": "user"}
    with write_tx(res.engine) as conn:
        conn.execute(insert(MemoryEntry.__table__).values(session_id=999_999, **row))  # type: ignore[attr-defined]
    assert memory.orphaned_sessions(res.engine) == [999_999]
    report = pruning.prune_now(res)
    assert (report["expired_sessions"], report["expired_items"]) == (1, 1)
    assert memory.orphaned_sessions(res.engine) == []
    assert memory.load(res.engine, keep)


def test_deleting_or_expiring_a_session_takes_its_memory(res: Resources) -> None:
    """A session deleted through the API path or expired by retention leaves no memory rows behind."""
    deleted, expired = session_with_memory(res, "deleted"), session_with_memory(res, "expired")
    tid = sessions.get_session_by_pk(res.engine, deleted).tenant_id
    assert sessions.delete_session(res.engine, tid, "deleted") == deleted
    assert snapshots.expire(res.engine, utcnow() + timedelta(days=1)) == [expired]
    assert memory.orphaned_sessions(res.engine) == []
    assert memory.sessions_with_memory(res.engine) == []


def test_cli_dry_run_prints_what_it_would_do_and_writes_nothing(
    settings: Settings, res: Resources, database_url: str
) -> None:
    """`compactd prune --dry-run` lists each removal and merge with its reason; `compactd prune` applies them."""
    pk = session_with_memory(res)
    before = memory.history(res.engine, pk)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "api.cli.command", "prune", *args],
            env=settings_env(settings),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = cli("--dry-run")
    assert "session s (tenant" in out
    assert "remove blockers/pytest tests/test_login.py: resolved blocker" in out
    assert "merge decisions/bcrypt-old: near-duplicate of bcrypt" in out
    assert "remove notes/stale: not referenced since" in out
    assert memory.history(res.engine, pk) == before
    assert "removed=2 merged=1" in cli()
    assert "nothing to prune" in cli("--dry-run")


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_beat_prunes_exactly_once_per_period_with_two_beats_running(
    settings: Settings, res: Resources, tmp_path: Path
) -> None:
    """The real schedule (every 2 s), two beat processes and a worker with two processes: every
    period is pruned once (the other beat's message finds it claimed), never twice."""
    fast = settings.model_copy(update={"memory_prune_every_seconds": PERIOD_SECONDS})
    pk = session_with_memory(res)
    runs = Runs(res.cache.client, settings.redis_prefix, "prune")
    worker = Worker(fast, "worker", "--concurrency=2", log=tmp_path / "worker.log")
    beats = [
        Worker(
            fast.model_copy(update={"var_dir": tmp_path / f"beat{n}"}), "beat", log=tmp_path / f"beat{n}.log"
        )
        for n in (1, 2)
    ]
    try:
        worker.wait_ready()
        for beat in beats:
            beat.wait_ready("beat: Starting")
        wait_for(lambda: runs.history(), 15)
        time.sleep(8.0)
        stopping = utcnow()
        for beat in beats:
            beat.stop()
        stopped = utcnow()  # a beat slow to stop (a loaded machine) may send a period more meanwhile
        time.sleep(1.0)  # let the worker finish what the beats sent last
    finally:
        for beat in beats:
            beat.stop()
        worker.stop()

    history = runs.history()
    periods = [datetime.fromisoformat(r["period"]) for r in history]

    def elapsed(until: datetime) -> int:
        last, _ = period(until, every_seconds=PERIOD_SECONDS, at="03:00")
        return round((last - periods[0]).total_seconds() / PERIOD_SECONDS) + 1

    elapsed_periods, stop_periods = elapsed(stopping), elapsed(stopped)
    sent = [b.log.read_text().count("Sending due task prune-memory") for b in beats]
    print(
        f"periods={elapsed_periods} runs={len(history)} skipped={runs.skipped_count()} sent_per_beat={sent}"
    )
    print(
        "\n".join(
            f"{r['period']} pid={r['pid']} removed={r['removed']} merged={r['merged']}" for r in history
        )
    )
    assert len(periods) == len(set(periods)), "a period was pruned twice"
    assert all(n >= elapsed_periods - 2 for n in sent), "both beats kept sending the task"
    # one run per period from the first run until the beats were told to stop (the last may have
    # had no message yet), and none past the moment they had stopped
    assert elapsed_periods - 1 <= len(history) <= stop_periods
    assert len(history) + runs.skipped_count() == sum(sent), "every other message found its period claimed"
    # the memory was pruned by the first run only: later runs find nothing to do
    assert (history[0]["removed"], history[0]["merged"]) == (2, 1)
    assert all(r["removed"] == r["merged"] == 0 for r in history[1:])
    assert sum(r.event.origin == "prune" for r in memory.history(res.engine, pk)) == 3


def test_two_claims_of_one_period_one_wins(res: Resources) -> None:
    """The claim is a Redis SET NX on the period's key: the first caller wins, a later one is refused."""
    runs = Runs(res.cache.client, res.settings.redis_prefix, "prune")
    start = utcnow().replace(microsecond=0)
    assert runs.claim(start, timedelta(seconds=2))
    assert not runs.claim(start, timedelta(seconds=2))
    assert runs.claim(start + timedelta(seconds=2), timedelta(seconds=2))
    ttl_ms = res.cache.client.pttl(runs.claim_key(start))
    assert 2_000 < ttl_ms <= 64_000  # outlives its period
