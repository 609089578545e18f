"""Worker-side faults with real processes and real kills: nothing is lost, nothing happens twice.

- pool children, or the whole worker, SIGKILLed mid-compaction over 200 sessions: after a restart
  every session is compacted, one snapshot per (session, through_seq), and each equals what a
  crash-free run (in-process, on a second database) published;
- the broker restarted without persistence, or flushed: beat's sweep finds the sessions in the
  database (idle or not) and compacts them;
- the same message delivered twice, and a task outliving a tiny visibility timeout: one summary,
  one snapshot, counters not doubled;
- a summary that fails transiently is retried by the job with backoff, with no append; a
  permanent failure is not; an idle session whose retries died gets its summary from the sweep.

Servers a test kills or restarts are private (redis-server on a free port, no persistence); the
shared Redis and PostgreSQL are only used through unique key prefixes and schemas.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, func, select

from api.http.app import create_app
from tests.conftest import require
from tests.fakes.messages_api import FakeMessagesAPI, RecordedRequest, Reply, drop, error, reply
from tests.integration.conftest import (
    Worker,
    flush_prefix,
    make_settings,
    wait_for,
)
from tests.integration.realdata import claude_code_files, load_messages
from tests.services import PrivateRedis
from worker.celery_app import sender
from worker.compaction.model import Turn
from worker.enqueue import CeleryEnqueue
from worker.flows import compact as jobs
from worker.flows.sweep import sweep_sessions
from worker.ingest import ingest
from worker.resources import Resources
from worker.settings import Settings
from worker.store import sessions, snapshots
from worker.store.sessions import SN, S
from worker.store.tables import utcnow
from worker.store.tenants import create_tenant
from worker.summarizers import PRICES_PER_MTOK

pytestmark = [pytest.mark.services, pytest.mark.data]

WINDOW = 4_000  # budget 3,000: every generated session is past its summarize trigger, and small
FAST_SESSIONS = 200
SOAK_SESSIONS = 1_000
TIMEOUT = 180.0  # generous: a wait, never a speed assertion
READY = 120.0  # a worker start on a loaded 2-core machine


# -- private servers and processes ------------------------------------------------------------


def pool_children(worker: Worker) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(worker.proc.pid)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def kill_whole(worker: Worker) -> None:
    """SIGKILL the main process and every pool child at once: nothing shuts down cleanly."""
    pids = [*pool_children(worker), worker.proc.pid]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    worker.proc.wait()
    # children notice their parent died and go; wait so the restart is not racing them
    wait_for(lambda: not any(_alive(pid) for pid in pids), 20)
    worker.out.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


class SlowMessagesAPI(FakeMessagesAPI):
    """The fake Messages API answering each request only after `delay` seconds (a slow summary)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def _next(self, request: RecordedRequest) -> Reply:
        r = super()._next(request)
        self._stopping.wait(self.delay)
        return r


# -- sessions from real transcripts ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Corpus:
    """Sessions to compact: (client id, turns), prefixes of real transcripts, ingested once."""

    sessions: tuple[tuple[str, tuple[Turn, ...]], ...]


_CORPORA: dict[int, Corpus] = {}


def corpus(n: int, res: Resources) -> Corpus:
    """n sessions cut from the shared Claude Code transcripts at varying lengths, each past the
    summarize trigger of a WINDOW-token session (so every one must shrink: a new epoch, or a summary
    prepared for the next quiet point when the cut ends on a tool call) and at most
    three budgets long (so 200 of them compact in seconds)."""
    if n in _CORPORA:
        return _CORPORA[n]
    files = [p for p in claude_code_files() if 20_000 < p.stat().st_size < 400_000][:6]
    require(bool(files), "needs the shared data: a Claude Code transcript of 20-400 KB")
    transcripts = [
        ingest(load_messages(p), first_seq=1, redactor=res.redactor, policy=res.base_policy).turns
        for p in files
    ]
    policy = res.policy_for(WINDOW, None)
    cuts = [
        (i, end)
        for i, turns in enumerate(transcripts)
        for end in range(4, len(turns) + 1)
        if policy.summarize_trigger_tokens < sum(t.tokens for t in turns[:end]) < 3 * policy.budget_tokens
    ]
    require(len(cuts) >= 10, "too few transcript prefixes past the summarize trigger")
    out = []
    for k in range(n):
        i, end = cuts[(k * 7) % len(cuts)]
        out.append((f"s{k:04d}", tuple(transcripts[i][:end])))
    _CORPORA[n] = Corpus(tuple(out))
    return _CORPORA[n]


def append_all(res: Resources, tenant_id: int, c: Corpus) -> list[sessions.Appended]:
    profile = sessions.Profile(context_window=WINDOW)
    return [
        sessions.append_turns(res.engine, tenant_id, sid, turns, profile=profile) for sid, turns in c.sessions
    ]


# -- what the database holds -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    epoch: int
    through_seq: int
    prompt: str
    state: str
    report: str

    @property
    def prepared(self) -> bool:
        """A summary was prepared (kept pending for the next quiet point)."""
        return any(
            st["stage"] == "Summarize" and st["turns_evicted"] > 0
            for st in orjson.loads(self.report or "{}").get("stages", [])
        )


def published(engine: Engine) -> dict[str, Published]:
    """Each session's newest snapshot, by client id."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(S.c.client_id, SN.c.epoch, SN.c.through_seq, SN.c.prompt, SN.c.state, SN.c.report)
            .join(SN, SN.c.session_id == S.c.id)
            .order_by(S.c.client_id, SN.c.epoch, SN.c.through_seq)
        ).all()
    return {r.client_id: Published(r.epoch, r.through_seq, r.prompt, r.state, r.report) for r in rows}


def snapshots_per_through(engine: Engine) -> dict[tuple[str, int], int]:
    """How many snapshots each (session, through_seq) has (a second publish would keep both)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(S.c.client_id, SN.c.through_seq, func.count())
            .join(SN, SN.c.session_id == S.c.id)
            .group_by(S.c.client_id, SN.c.through_seq)
        ).all()
    return {(r[0], r[1]): r[2] for r in rows}


def compacted(engine: Engine) -> int:
    """Sessions whose snapshot covers their newest version."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(S).where(S.c.compacted_through >= S.c.version)
            ).scalar_one()
        )


def in_flight(broker: redis.Redis) -> int:
    """Messages delivered to a worker and not acked yet (kombu's Redis transport keeps them here)."""
    return int(broker.hlen("unacked"))


def running_jobs(cache: redis.Redis, prefix: str) -> set[bytes]:
    """The tokens of the session locks held now: one per job executing (jobs.compact holds its
    session's lock from start to end; a killed job's stays until it expires)."""
    return {t for k in cache.scan_iter(f"{prefix}lock:*") if (t := cache.get(k)) is not None}


@pytest.fixture(scope="module")
def crash_free(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Callable[[int], dict[str, Published]]:
    """What a run with no kills publishes for the n-session corpus: jobs.compact in this process,
    one job per session, on a SQLite database of its own."""
    done: dict[int, dict[str, Published]] = {}

    def run(n: int) -> dict[str, Published]:
        if n not in done:
            tmp = tmp_path_factory.mktemp(f"crash-free-{n}")
            settings = make_settings(tmp, f"sqlite:///{tmp / 'c.db'}", redis_url)
            res = Resources.build(settings)
            try:
                tid = create_tenant(res.engine, "crash-free")[0]
                for a in append_all(res, tid, corpus(n, res)):
                    assert jobs.compact(tid, a.session_pk, a.version, res) == "published"
                done[n] = published(res.engine)
            finally:
                res.close()
                flush_prefix(redis_url, settings.redis_prefix)
        return done[n]

    return run


# -- 1. worker crash ---------------------------------------------------------------------------


def _crash_run(
    tmp_path: Path, pg_url: str, broker: PrivateRedis, n: int, kill: str, kills: int = 1
) -> tuple[Resources, float]:
    """Enqueue n sessions through the API's path, start a worker (concurrency 2) and SIGKILL its
    pool children or the whole worker while some but not all sessions are done and messages are in
    flight; restart as needed and wait until every session is compacted. Returns the resources (on
    the run's database) and the seconds from the last kill to the last session compacted."""
    settings = make_settings(
        tmp_path, pg_url, broker.url, sweep_seconds=1.0, idle_seconds=0.3, lock_seconds=5
    )
    res = Resources.build(settings)
    tid = create_tenant(res.engine, "crash")[0]
    with CeleryEnqueue(settings, res) as enqueue:
        for a in append_all(res, tid, corpus(n, res)):
            enqueue(tid, a.session_pk, a.version)
    client = broker.client()
    assert client.llen(settings.queue) == n  # every job is queued before any worker runs
    procs: list[Worker] = []
    worker = Worker(settings, "worker", "--concurrency=2", log=tmp_path / "worker-0.log")
    procs.append(worker)
    stale: set[bytes] = set()  # locks a killed job left behind (they expire after lock_seconds)
    try:
        worker.wait_ready(timeout=READY)
        if kill == "whole":
            procs.append(Worker(settings, "beat", log=tmp_path / "beat.log"))
        for round_ in range(kills):
            low, high = n * (round_ + 1) // (kills + 2), n * (round_ + 2) // (kills + 2)

            def mid_run(lo: int = low) -> bool:
                # some sessions done, not all, a message delivered and not acked, and a job executing
                # (not only prefetched: a kill between two jobs would test nothing)
                return (
                    compacted(res.engine) >= lo
                    and in_flight(client) > 0
                    and bool(running_jobs(client, settings.redis_prefix) - stale)
                )

            wait_for(mid_run, TIMEOUT, 0.01)
            done_at_kill = compacted(res.engine)
            assert done_at_kill < high + n // 10, "the kill came too late to land mid-run"
            if kill == "children":
                _kill_children_until_a_job_is_lost(worker, tmp_path / "worker-0.log", mid_run)
            else:
                kill_whole(worker)
                worker = Worker(
                    settings, "worker", "--concurrency=2", log=tmp_path / f"worker-{round_ + 1}.log"
                )
                procs.append(worker)
                worker.wait_ready(timeout=READY)
            killed_at = time.monotonic()
            stale.update(running_jobs(client, settings.redis_prefix))
        wait_for(lambda: compacted(res.engine) == n, TIMEOUT, 0.05)
        recovery = time.monotonic() - killed_at
        if kill == "children":
            assert "WorkerLostError" in (tmp_path / "worker-0.log").read_text(errors="replace")
        # let any redelivered or swept duplicate run to its end before the database is judged
        time.sleep(1.0)
    except BaseException:
        res.close()  # the caller closes it on success; a failure here must not leak its connections
        raise
    finally:
        for p in reversed(procs):
            p.stop()
        client.close()
    return res, recovery


def _kill_children_until_a_job_is_lost(worker: Worker, log: Path, mid_run: Any, attempts: int = 5) -> None:
    """SIGKILL the pool children while a job runs, again if the job ended just before the kill (a
    loaded machine: no `WorkerLostError` follows, and a kill between two jobs tests nothing)."""
    for _ in range(attempts):
        children = pool_children(worker)
        assert children
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        try:
            wait_for(lambda: "WorkerLostError" in log.read_text(errors="replace"), 5.0, 0.05)
            return
        except AssertionError:
            wait_for(mid_run, TIMEOUT, 0.01)  # the next job under way: kill again
    raise AssertionError(f"no kill of {attempts} landed while a job ran")


def _assert_equals_crash_free(res: Resources, expected: dict[str, Published], n: int) -> None:
    got = published(res.engine)
    assert len(got) == n and set(got) == set(expected)
    assert all(count == 1 for count in snapshots_per_through(res.engine).values())
    # real compaction work happened for every session: a new epoch, or (a cut that ends on a tool
    # call waiting for its result: no quiet point, below the deadline) a summary prepared for the next
    assert all(p.epoch >= 1 or p.prepared for p in got.values())
    assert sum(p.epoch >= 1 for p in got.values()) >= 0.9 * n
    different = [sid for sid in expected if got[sid] != expected[sid]]
    assert not different, f"{len(different)} sessions differ from the crash-free run, e.g. {different[:5]}"


@pytest.mark.parametrize("kill", ["children", "whole"])
def test_kill_9_mid_compaction_loses_nothing_and_equals_a_crash_free_run(
    kill: str,
    tmp_path: Path,
    pg_url: str,
    private_redis: PrivateRedis,
    crash_free: Callable[[int], dict[str, Published]],
    record_property: Callable[[str, object], None],
) -> None:
    """200 sessions queued; the pool children (redelivered: acks_late, reject_on_worker_lost) or
    the whole worker (restarted; its unacked messages sit out the visibility timeout, so beat's
    sweep resends them) are SIGKILLed mid-run: every session ends compacted, with one snapshot per
    (session, through_seq), byte-identical to the crash-free run's."""
    expected = crash_free(FAST_SESSIONS)
    res, recovery = _crash_run(tmp_path, pg_url, private_redis, FAST_SESSIONS, kill)
    try:
        record_property("recovery_seconds", round(recovery, 2))
        print(f"kill={kill} sessions={FAST_SESSIONS} recovery_seconds={recovery:.2f}")
        _assert_equals_crash_free(res, expected, FAST_SESSIONS)
    finally:
        res.close()


@pytest.mark.soak
@pytest.mark.parametrize("kill", ["children", "whole"])
def test_soak_repeated_kills_over_1000_sessions(
    kill: str,
    tmp_path: Path,
    pg_url: str,
    private_redis: PrivateRedis,
    crash_free: Callable[[int], dict[str, Published]],
    record_property: Callable[[str, object], None],
) -> None:
    """The same over 1,000 sessions with three kills in a row."""
    expected = crash_free(SOAK_SESSIONS)
    res, recovery = _crash_run(tmp_path, pg_url, private_redis, SOAK_SESSIONS, kill, kills=3)
    try:
        record_property("recovery_seconds", round(recovery, 2))
        _assert_equals_crash_free(res, expected, SOAK_SESSIONS)
    finally:
        res.close()


# -- 2. broker loss ----------------------------------------------------------------------------


def test_a_broker_restarted_without_persistence_loses_the_queue_and_the_sweep_finds_every_session(
    tmp_path: Path, pg_url: str, redis_url: str, private_redis: PrivateRedis
) -> None:
    """200 compaction messages queued on a broker of their own; it is SIGKILLed and restarted empty
    (the cache Redis, with the job claims, stays up): beat's sweep finds the 200 sessions from the
    database and a worker compacts them all."""
    settings = make_settings(
        tmp_path, pg_url, redis_url, broker_url=private_redis.url, sweep_seconds=1.0, idle_seconds=0.3
    )
    res = Resources.build(settings)
    procs: list[Worker] = []
    try:
        tid = create_tenant(res.engine, "broker")[0]
        with CeleryEnqueue(settings, res) as enqueue:
            for a in append_all(res, tid, corpus(FAST_SESSIONS, res)):
                enqueue(tid, a.session_pk, a.version)
        with private_redis.client() as broker:
            assert broker.llen(settings.queue) == FAST_SESSIONS
        private_redis.kill()
        private_redis.start()
        with private_redis.client() as broker:
            assert broker.llen(settings.queue) == 0  # the messages are gone
        procs = [Worker(settings, "worker", "--concurrency=2", log=tmp_path / "worker.log")]
        procs[0].wait_ready(timeout=READY)
        procs.append(Worker(settings, "beat", log=tmp_path / "beat.log"))
        wait_for(lambda: compacted(res.engine) == FAST_SESSIONS, TIMEOUT, 0.1)
        assert "sweep.enqueued" in (tmp_path / "worker.log").read_text()
        assert all(c == 1 for c in snapshots_per_through(res.engine).values())
    finally:
        for p in reversed(procs):
            p.stop()
        res.close()
        flush_prefix(redis_url, settings.redis_prefix)


def test_a_flushed_broker_loses_the_jobs_of_busy_sessions_and_the_sweep_still_finds_them(
    tmp_path: Path, pg_url: str, private_redis: PrivateRedis
) -> None:
    """Sessions that appended just now (not idle: idle_seconds is an hour) lose their queued jobs
    and claims to a flush: the sweep still sends one job each (claimed, so a second sweep adds
    nothing while it waits), and a worker compacts them."""
    settings = make_settings(tmp_path, pg_url, private_redis.url, idle_seconds=3600.0)
    res = Resources.build(settings)
    try:
        tid = create_tenant(res.engine, "busy")[0]
        appended = append_all(res, tid, corpus(FAST_SESSIONS, res))[:20]
        with CeleryEnqueue(settings, res) as enqueue:
            for a in appended:
                enqueue(tid, a.session_pk, a.version)
        with private_redis.client() as broker:
            assert broker.llen(settings.queue) == 20
            broker.flushall()
        sent: list[tuple[int, int, int]] = []
        lost = {a.session_pk for a in appended}
        assert sweep_sessions(res, lambda t, s, v: sent.append((t, s, v))) >= 20
        assert lost <= {pk for _, pk, _ in sent}
        again: list[tuple[int, int, int]] = []
        sweep_sessions(res, lambda t, s, v: again.append((t, s, v)))
        assert not lost & {pk for _, pk, _ in again}  # their jobs are pending: claimed
        with sender(settings) as app:
            for t, s, v in sent:
                app.send_task("compactd.compact", args=[t, s, v], queue=settings.queue)
        worker = Worker(settings, "worker", "--concurrency=2", log=tmp_path / "worker.log")
        try:
            worker.wait_ready(timeout=READY)
            wait_for(lambda: all(_through(res.engine, pk) >= 1 for pk in lost), TIMEOUT, 0.1)
        finally:
            worker.stop()
    finally:
        res.close()


def _through(engine: Engine, pk: int) -> int:
    with engine.connect() as conn:
        row = conn.execute(select(S.c.compacted_through, S.c.version).where(S.c.id == pk)).one()
    return 1 if row.compacted_through >= row.version else 0


# -- 3. duplicate delivery, a task outliving the visibility timeout ----------------------------


def _anthropic_settings(
    tmp_path: Path, database_url: str, redis_url: str, fake: FakeMessagesAPI, **kw: object
) -> Settings:
    return make_settings(
        tmp_path,
        database_url,
        redis_url,
        summarizer="anthropic",
        anthropic_api_key="sk-ant-test-not-a-secret",
        anthropic_base_url=fake.base_url,
        anthropic_timeout_seconds=60,
        anthropic_max_retries=0,
        lock_seconds=30,
        **kw,
    )


def _real_session(res: Resources, tenant_id: int, sid: str = "s") -> sessions.Appended:
    """A real transcript past the deadline of a 10k window: one job summarizes and switches."""
    files = [p for p in claude_code_files() if 60_000 < p.stat().st_size < 400_000]
    require(bool(files), "needs the shared data: a Claude Code transcript of 60-400 KB")
    turns = ingest(load_messages(files[-1]), first_seq=1, redactor=res.redactor, policy=res.base_policy).turns
    return sessions.append_turns(
        res.engine, tenant_id, sid, turns, profile=sessions.Profile(context_window=10_000)
    )


@contextmanager
def _summarizing(
    tmp_path: Path,
    redis_url: str,
    fake: FakeMessagesAPI,
    tenant: str,
    *,
    worker: Callable[..., Worker] = Worker,
    concurrency: int = 2,
    **kw: object,
) -> Iterator[tuple[Settings, Resources, Worker, int, sessions.Appended]]:
    """A worker on its own SQLite file summarizing through `fake`, ready, and a real session past
    its deadline: (settings, resources, worker, tenant id, the append)."""
    settings = _anthropic_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url, fake, **kw)
    res = Resources.build(settings)
    proc = worker(settings, "worker", f"--concurrency={concurrency}", log=tmp_path / "worker.log")
    try:
        proc.wait_ready(timeout=READY)
        tid = create_tenant(res.engine, tenant)[0]
        yield settings, res, proc, tid, _real_session(res, tid)
    finally:
        proc.stop()
        res.close()


def _note_served(res: Resources, pk: int, text: str) -> bool:
    loaded = snapshots.load(res.engine, pk)
    return loaded is not None and loaded.snapshot is not None and text in loaded.snapshot.prompt


def _snapshot(res: Resources, pk: int) -> Any:
    """The session's newest snapshot row (None before the first publish)."""
    loaded = snapshots.load(res.engine, pk)
    return loaded.snapshot if loaded is not None else None


def _assert_once(res: Resources, pk: int, fake: FakeMessagesAPI) -> None:
    assert len(fake.requests) == 1  # the summarizer was called once for the epoch
    per = snapshots_per_through(res.engine)
    assert per and all(c == 1 for c in per.values())
    stats = res.cache.counters.session_stats(pk)
    assert sum(stats["switches"].values()) == 1
    assert stats["summarizer_usage"]["summaries"] == 1 and stats["summarizer_usage"]["input_tokens"] == 100
    assert res.cache.counters.totals().get("compactions_new_epoch") == 1


def test_the_same_message_delivered_three_times_has_its_effects_once(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    """One compaction message sent three times (same task id) while the first copy waits on a slow
    summary: the copies wait for the session lock, then find the snapshot current."""
    with (
        SlowMessagesAPI(delay=3.0) as fake,
        _summarizing(tmp_path, private_redis.url, fake, "dup") as (settings, res, worker, tid, a),
    ):
        with sender(settings) as app:
            for _ in range(3):
                app.send_task(
                    "compactd.compact",
                    args=[tid, a.session_pk, a.version],
                    queue=settings.queue,
                    task_id="dup-1",
                )
        wait_for(lambda: _note_served(res, a.session_pk, "default note"), TIMEOUT)
        # the copies end as "current" (each waited for the lock held by the first)
        wait_for(lambda: worker.log.read_text().count("'current'") >= 2, TIMEOUT)
        _assert_once(res, a.session_pk, fake)


def test_a_task_outliving_the_visibility_timeout_is_redelivered_and_has_its_effects_once(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    """With a 2 s visibility timeout and a summary taking 6 s, Redis hands the running task's
    message to the worker again: the copy waits for the lock and finds the snapshot current."""
    with (
        SlowMessagesAPI(delay=6.0) as fake,
        _summarizing(tmp_path, private_redis.url, fake, "vis", worker=partial(Worker, visibility=2)) as (
            settings,
            res,
            worker,
            tid,
            a,
        ),
    ):
        with sender(settings) as app:
            app.send_task(
                "compactd.compact", args=[tid, a.session_pk, a.version], queue=settings.queue, task_id="vis-1"
            )
        wait_for(lambda: _note_served(res, a.session_pk, "default note"), TIMEOUT)
        # the redelivered copy ran (it was received twice) and ended as "current"
        log = lambda: worker.log.read_text(errors="replace")  # noqa: E731
        wait_for(lambda: log().count("compactd.compact[vis-1] received") >= 2, TIMEOUT)
        wait_for(lambda: "'current'" in log(), TIMEOUT)
        _assert_once(res, a.session_pk, fake)


def test_an_llm_summary_is_counted_on_metrics(tmp_path: Path, private_redis: PrivateRedis) -> None:
    """A real worker's LLM summary reaches /metrics: summaries, input and output tokens as the
    Messages API reported them, and the cost at the price table's rate for the configured model."""
    note = "## Task\nAudit the service.\n\n## Next planned action\nGo on."
    with (
        FakeMessagesAPI(default=reply(note, input_tokens=1234, output_tokens=56)) as fake,
        _summarizing(tmp_path, private_redis.url, fake, "metrics") as (settings, res, _worker, tid, a),
    ):
        with sender(settings) as app:
            app.send_task("compactd.compact", args=[tid, a.session_pk, a.version], queue=settings.queue)
        wait_for(lambda: _note_served(res, a.session_pk, "Audit the service."), TIMEOUT)
        with TestClient(create_app(settings, enqueue=lambda *_: None)) as client:

            def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
                # the job flushes its counters after it publishes: wait for them, not for the note
                samples = {
                    (s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(client.get("/metrics").text)
                    for s in family.samples
                }
                return samples if samples.get(("compactd_summaries_total", ()), 0) >= 1 else None

            samples = wait_for(scraped, TIMEOUT)
    calls = len(fake.requests)
    input_price, output_price = PRICES_PER_MTOK[settings.anthropic_model]
    assert calls >= 1
    assert samples[("compactd_summaries_total", ())] == calls
    assert samples[("compactd_summarizer_tokens_total", (("direction", "input"),))] == 1234 * calls
    assert samples[("compactd_summarizer_tokens_total", (("direction", "output"),))] == 56 * calls
    expected = calls * (1234 * input_price + 56 * output_price) / 1e6
    assert samples[("compactd_summarizer_cost_usd_total", ())] == pytest.approx(expected)


# -- 4. a failed summary is retried by itself --------------------------------------------------


@given(attempt=st.integers(min_value=0, max_value=64), jitter=st.floats(min_value=0.0, max_value=0.999))
def test_summary_retry_backoff_is_capped_and_ends(attempt: int, jitter: float) -> None:
    """Delays grow (each at least half of base x 2^attempt), never pass the cap, and stop after
    SUMMARY_RETRY_ATTEMPTS (the sweep takes over from there)."""
    delay = jobs.summary_retry_delay(attempt, jitter)
    if attempt >= jobs.SUMMARY_RETRY_ATTEMPTS:
        assert delay is None
        return
    assert delay is not None
    ceiling = min(jobs.SUMMARY_RETRY.max_seconds, jobs.SUMMARY_RETRY.base_seconds * 2**attempt)
    assert ceiling / 2 <= delay <= ceiling <= jobs.SUMMARY_RETRY.max_seconds


def test_a_summary_failing_transiently_is_retried_with_backoff_without_any_append(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    """The Messages API answers 500, 529, then drops the connection, then replies: the structural
    snapshot is served meanwhile, the job retries by itself with growing delays, and with no
    further append the note is switched in."""
    with FakeMessagesAPI() as fake:
        fake.script(error(500), error(529), drop(), reply("NOTE-AFTER-RETRIES"))
        with _summarizing(tmp_path, private_redis.url, fake, "retry", concurrency=1) as (
            settings,
            res,
            worker,
            tid,
            a,
        ):
            with CeleryEnqueue(settings, res) as enqueue:
                enqueue(tid, a.session_pk, a.version)
            structural = wait_for(lambda: (s := _snapshot(res, a.session_pk)) and s, TIMEOUT)
            assert jobs.summary_failed(structural.report) == "transient"
            wait_for(lambda: _note_served(res, a.session_pk, "NOTE-AFTER-RETRIES"), TIMEOUT)
            final = _snapshot(res, a.session_pk)
    assert len(fake.requests) == 4
    assert final.epoch == structural.epoch + 1 and final.through_seq == a.version
    assert jobs.summary_failed(final.report) is None
    lines = [orjson.loads(x) for x in worker.log.read_text().splitlines() if x.startswith("{")]
    scheduled = [x for x in lines if x.get("event") == "summary.retry_scheduled"]
    assert [x["attempt"] for x in scheduled] == [1, 2, 3]
    assert all(x["session_id"] == a.session_pk for x in scheduled)
    assert scheduled[0]["countdown"] <= scheduled[2]["countdown"]


def test_a_permanent_summarizer_error_is_not_retried_until_the_next_append(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    """HTTP 400 is not retried (by the job or by beat's sweep); the structural snapshot stays until
    the next append, whose job tries again."""
    with FakeMessagesAPI() as fake:
        fake.script(error(400))
        with _summarizing(
            tmp_path, private_redis.url, fake, "permanent", concurrency=1, sweep_seconds=0.5
        ) as (settings, res, worker, tid, a):
            beat = Worker(settings, "beat", log=tmp_path / "beat.log")
            enqueue = CeleryEnqueue(settings, res)
            try:
                enqueue(tid, a.session_pk, a.version)
                snap = wait_for(lambda: (s := _snapshot(res, a.session_pk)) and s, TIMEOUT)
                assert jobs.summary_failed(snap.report) == "permanent"
                # several sweeps and more than the first retry's delay later: still one request
                wait_for(lambda: worker.log.read_text().count("compactd.sweep") >= 6, TIMEOUT)
                assert len(fake.requests) == 1
                assert "summary.retry_scheduled" not in worker.log.read_text()
                more = [Turn(seq=0, role="user", content=({"type": "text", "text": "go on"},), tokens=3)]  # type: ignore[arg-type]
                b = sessions.append_turns(res.engine, tid, "s", more)
                enqueue(tid, b.session_pk, b.version)
                wait_for(lambda: _note_served(res, a.session_pk, "default note"), TIMEOUT)
                assert len(fake.requests) == 2
            finally:
                enqueue.close()
                beat.stop()


def test_an_idle_session_whose_summary_retries_died_gets_its_summary_from_the_sweep(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    """A job fails its summary transiently and no retry follows (the worker that held it died):
    the session sits idle on a structural snapshot until beat's sweep finds it in the database and
    a worker switches the summary in."""
    with FakeMessagesAPI() as fake:
        fake.script(error(529))
        settings = _anthropic_settings(
            tmp_path, f"sqlite:///{tmp_path / 'c.db'}", private_redis.url, fake, sweep_seconds=1.0
        )
        res = Resources.build(settings)
        try:
            tid = create_tenant(res.engine, "idle")[0]
            a = _real_session(res, tid)
            assert jobs.compact(tid, a.session_pk, a.version, res) == "published"  # no retry callback
            snap = _snapshot(res, a.session_pk)
            assert jobs.summary_failed(snap.report) == "transient"
            time.sleep(settings.idle_seconds)
            assert [pk for _, pk, _ in snapshots.summary_retry_due(res.engine, utcnow())] == [a.session_pk]
            worker = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log")
            beat = Worker(settings, "beat", log=tmp_path / "beat.log")
            try:
                worker.wait_ready(timeout=READY)
                wait_for(lambda: _note_served(res, a.session_pk, "default note"), TIMEOUT)
            finally:
                beat.stop()
                worker.stop()
            assert snapshots.summary_retry_due(res.engine, utcnow()) == []
            assert len(fake.requests) == 2
            assert _snapshot(res, a.session_pk).epoch == snap.epoch + 1
        finally:
            res.close()
