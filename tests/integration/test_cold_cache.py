"""A session idle past its provider cache's lifetime gets a cold job from the beat's sweep, and a
summary prepared for it is switched in then, when the rewrite costs no cache write (issue 40.4):
the store's query on both backends, and the whole path with a real worker and beat."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, update

from tests.integration.conftest import Worker, flush_prefix, make_settings, wait_for
from tests.integration.test_worker import _append_real, _report
from worker.flows import compact as jobs
from worker.resources import Resources
from worker.store import sessions, snapshots
from worker.store.sessions import S
from worker.store.tables import utcnow
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services


def _idle(engine: Engine, pk: int, seconds: float, ttl: int | None = None) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(S)
            .where(S.c.id == pk)
            .values(last_append_at=utcnow() - timedelta(seconds=seconds), cache_ttl_seconds=ttl)
        )


def test_the_sweep_finds_the_sessions_whose_cache_just_expired(engine: Engine) -> None:
    """Sessions idle just past their lifetime (the default's, or the hour a client asked for) are
    found, whatever else is idle: not one still warm, not one that cooled long ago."""
    tid = create_tenant(engine, "cold")[0]
    idle = {  # session: (seconds idle, its own lifetime)
        "just-cooled": (310, None),
        "warm": (200, None),
        "long-cold": (900, None),
        "hour-warm": (400, 3600),
        "hour-cooled": (3650, 3600),
    }
    pks = {}
    for sid, (seconds, ttl) in idle.items():
        a = sessions.append_turns(engine, tid, sid, [jobs_turn()])
        _idle(engine, a.session_pk, seconds, ttl)
        pks[a.session_pk] = sid
    # 1,100 sessions that went idle earlier do not hide the ones that just cooled
    for n in range(1100):
        a = sessions.append_turns(engine, tid, f"old-{n}", [jobs_turn()])
        _idle(engine, a.session_pk, 5000)
    found = {pks[pk] for _, pk, _ in snapshots.cooled(engine, utcnow(), 300, 90) if pk in pks}
    assert found == {"just-cooled", "hour-cooled"}


def jobs_turn() -> object:
    from tests.integration.test_worker import text_turn

    return text_turn("user", "hello")


def test_a_prepared_summary_is_switched_in_when_the_cache_goes_cold(tmp_path: Path, redis_url: str) -> None:
    """A quiet session between the pre-trigger and the trigger keeps its prepared summary pending (a
    rewrite there costs a cache write); idle past the cache's lifetime, the beat's sweep sends it a
    cold job, and the summary goes in then: a new epoch, switched `cold`."""
    # the clipped prompt (~12.9k tokens) is past the pre-trigger (0.8 x 0.35 x 40,808 = 11.4k) and
    # short of the trigger (14.3k)
    settings = make_settings(
        tmp_path,
        f"sqlite:///{tmp_path / 'c.db'}",
        redis_url,
        summarize_trigger=0.35,
        clip_tokens=750,
        cache_ttl_seconds=3,
        sweep_seconds=0.5,
    )
    res = Resources.build(settings)
    beat = Worker(settings, "beat", log=tmp_path / "beat.log")
    worker = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log")
    try:
        worker.wait_ready()
        tid = create_tenant(res.engine, "cold")[0]
        a = _append_real(res, tid, "s", 50_000, "idle")
        assert jobs.compact(tid, a.session_pk, a.version, res) == "published"
        assert _report(res, a.session_pk)["switch"] == ""
        assert res.cache.pending.state(a.session_pk) is not None
        epoch = sessions.session_info(res.engine, tid, "s")["epoch"]
        wait_for(lambda: _report(res, a.session_pk)["switch"] == "cold", timeout=60)
        assert sessions.session_info(res.engine, tid, "s")["epoch"] == epoch + 1
        assert res.cache.counters.session_stats(a.session_pk)["switches"] == {"cold": 1}
        assert "cache_cold" in worker.log.read_text()
    finally:
        beat.stop()
        worker.stop()
        res.close()
        flush_prefix(redis_url, settings.redis_prefix)
