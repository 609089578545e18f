"""Redis and database faults on the API path, with a real `compactd api` process and private
servers that the tests kill, freeze and restart (never the shared 6379/5432 ones).

- Redis killed or frozen under fetch load: every fetch answers from the database within 1 s, an
  append still answers 200 (committed; the sweep compacts it later), and the cache refills.
- The database down: appends answer 503 with Retry-After and store nothing, cached fetches keep
  being served from Redis, and the service recovers by itself when the database returns.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings, wait_for
from tests.services import PrivatePostgres, PrivateRedis
from worker.cache.cache import Cache
from worker.cache.client import make_redis
from worker.flows import compact as jobs
from worker.flows.sweep import sweep_sessions
from worker.metrics import Recorder, field_of
from worker.resources import Resources
from worker.settings import Settings
from worker.store.db import read_tx
from worker.store.sessions import get_session, load_turns
from worker.store.tenants import tenant_for_key

pytestmark = [pytest.mark.services, pytest.mark.slow]

FETCH_SECONDS_MAX = 1.0  # the bound on any fetch while Redis is dead or frozen
THAW_SECONDS = 10.0  # Redis thawed: how soon the cache serves every fetch again


def _api(settings: Settings, log: Path) -> Worker:
    proc = Worker(settings, "api", log=log)
    proc.wait_ready("api.started")
    return proc


def _messages(n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"{tag} ask {n}"},
        {"role": "assistant", "content": f"{tag} answer {n}"},
    ]


def _texts(prompt: dict[str, Any]) -> list[str]:
    return [b["text"] for m in prompt["messages"] for b in m["content"] if b.get("type") == "text"]


def _fetch_sources(base: str) -> dict[str, float]:
    metrics = httpx.get(f"{base}/metrics", timeout=10).text
    found = {}
    for line in metrics.splitlines():
        if line.startswith("compactd_prompt_fetches_total{"):
            source = line.split('source="', 1)[1].split('"', 1)[0]
            found[source] = float(line.rsplit(" ", 1)[1])
    return found


def _cache_serving(base: str) -> tuple[dict[str, float], dict[str, float]] | None:
    """Two scrapes half a second apart if fetches were served from the cache between them and none
    from the database, else None."""
    before = _fetch_sources(base)
    time.sleep(0.5)
    after = _fetch_sources(base)
    grew = after.get("cache", 0) > before.get("cache", 0) and after.get("db", 0) == before.get("db", 0)
    return (before, after) if grew else None


def _fetched_from_cache(base: str, auth: dict[str, str]) -> dict[str, Any] | None:
    """One fetch of s0's prompt, its body if the cache served it (the cache counter grew by one)."""
    before = _fetch_sources(base).get("cache", 0)
    prompt = httpx.get(f"{base}/v1/sessions/s0/prompt", headers=auth).json()
    return prompt if _fetch_sources(base).get("cache", 0) == before + 1 else None


class FetchLoad:
    """Threads fetching the sessions' prompts in a loop, recording status, seconds and version."""

    def __init__(self, base: str, key: str, sids: list[str], threads: int = 4) -> None:
        self.base, self.auth, self.sids = base, {"Authorization": f"Bearer {key}"}, sids
        self.results: list[tuple[float, str, int, float, dict[str, Any] | None]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def _run(self, i: int) -> None:
        with httpx.Client(headers=self.auth, timeout=30) as http:
            n = i
            while not self.stopping.is_set():
                sid = self.sids[n % len(self.sids)]
                n += 1
                at, started = time.monotonic(), time.perf_counter()
                r = http.get(f"{self.base}/v1/sessions/{sid}/prompt")
                seconds = time.perf_counter() - started
                body = r.json() if r.status_code == 200 else None
                self.results.append((at, sid, r.status_code, seconds, body))

    def __enter__(self) -> FetchLoad:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join()

    def since(self, t0: float) -> list[tuple[float, str, int, float, dict[str, Any] | None]]:
        return [r for r in list(self.results) if r[0] >= t0]


def test_redis_killed_or_frozen_under_fetch_load(tmp_path: Path, private_redis: PrivateRedis) -> None:
    """Under fetch load, Redis frozen (SIGSTOP) and then killed: every fetch answers 200 with every
    appended turn, none takes 1 s or more; an append while Redis is dead answers 200 and is
    committed (the sweep finds it); after SIGCONT and after a restart the cache serves again."""
    key = f"cpd_{uuid.uuid4().hex}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = make_settings(
        tmp_path, f"sqlite:///{tmp_path / 'c.db'}", private_redis.url, port=port, default_api_key=key
    )
    api = _api(settings, tmp_path / "api.log")
    res = Resources.build(settings)
    auth = {"Authorization": f"Bearer {key}"}
    sids = [f"s{i}" for i in range(4)]
    try:
        tenant = tenant_for_key(res.engine, key)
        assert tenant is not None
        for sid in sids:
            for n in range(3):
                r = httpx.post(
                    f"{base}/v1/sessions/{sid}/turns", json={"messages": _messages(n, sid)}, headers=auth
                )
                assert r.status_code == 200, r.text
            row = get_session(res.engine, tenant, sid)
            assert jobs.compact(tenant, row.id, row.version, res) == "published"
        expected = {sid: [f"{sid} {w} {n}" for n in range(3) for w in ("ask", "answer")] for sid in sids}

        with FetchLoad(base, key, sids) as load:
            time.sleep(1.0)
            warm = _fetch_sources(base)
            assert warm.get("cache", 0) > 0 and warm.get("db", 0) == 0

            frozen_at = time.monotonic()
            private_redis.signal(signal.SIGSTOP)
            time.sleep(3.0)
            during_freeze = _fetch_sources(base)
            private_redis.signal(signal.SIGCONT)
            thawed_at = time.monotonic()
            # past the breaker's cool-down a probe closes it (on a loaded machine a probe may time
            # out and wait another cool-down): within THAW_SECONDS every fetch is a cache hit again
            after_thaw, thawed = wait_for(lambda: _cache_serving(base), timeout=THAW_SECONDS)

            killed_at = time.monotonic()
            private_redis.kill()
            extra = {"messages": [{"role": "user", "content": "s0 while redis is dead"}]}
            appended = httpx.post(f"{base}/v1/sessions/s0/turns", json=extra, headers=auth, timeout=30)
            appended_at = time.monotonic()
            time.sleep(3.0)
            private_redis.start()
            restarted_at = time.monotonic()
            time.sleep(2.5)
            results = load.since(frozen_at)

        # every fetch answered, complete, within the bound, through the freeze and the kill
        assert results, "no fetches recorded"
        assert {status for _, _, status, _, _ in results} == {200}
        slowest = max(seconds for _, _, _, seconds, _ in results)
        assert slowest < FETCH_SECONDS_MAX, slowest
        for at, sid, _, _, body in results:
            assert body is not None
            got = [t for t in _texts(body) if not t.startswith("<compactd-memory>")]  # the observer's task
            # a fetch started after the append answered has its turn; one before may or may not
            late = [*expected[sid], "s0 while redis is dead"] if sid == "s0" else expected[sid]
            assert got == late if at >= appended_at else got in (expected[sid], late), (sid, got)
        fetched_while = [
            r
            for r in results
            if frozen_at + 0.5 <= r[0] < thawed_at or killed_at + 0.5 <= r[0] < restarted_at
        ]
        assert len(fetched_while) > 10

        # while frozen the database served; once thawed, the cache (its data intact) serves again
        assert during_freeze.get("db", 0) > warm.get("db", 0)
        assert thawed["cache"] > after_thaw["cache"] and thawed.get("db", 0) == after_thaw.get("db", 0)

        # the append during the outage: answered, committed, left for the sweep
        assert appended.status_code == 200, appended.text
        row = get_session(res.engine, tenant, "s0")
        with read_tx(res.engine) as conn:
            assert [t.seq for t in load_turns(conn, row.id)] == list(range(1, 8))
        assert row.compacted_through == 6 and row.version == 7
        assert "compaction.enqueue_skipped" in api.log.read_text()
        time.sleep(settings.idle_seconds)
        found: list[tuple[int, int, int]] = []
        res.close()
        res = Resources.build(settings)  # its pooled Redis connections died with the old server
        assert sweep_sessions(res, lambda *a: found.append(a)) >= 1
        assert (tenant, row.id, 7) in found

        # the cache refills: the restarted Redis is empty; the sweep's job publishes again
        assert res.cache.prompts.get(row.id) is None
        assert jobs.compact(tenant, row.id, 7, res) == "published"
        # the API's breaker may still be open from the kill: within THAW_SECONDS a fetch is a hit
        prompt = wait_for(lambda: _fetched_from_cache(base, auth), timeout=THAW_SECONDS)
        assert [t for t in _texts(prompt) if not t.startswith("<compactd-memory>")] == [
            *expected["s0"],
            "s0 while redis is dead",
        ]
    finally:
        api.stop()
        res.close()


def test_database_down_appends_503_cached_fetches_served_and_recovers(
    tmp_path: Path, private_postgres: PrivatePostgres, redis_url: str
) -> None:
    """With the database stopped, an append answers 503 with Retry-After and stores nothing, a
    fetch of a session whose cached prompt covers every append answers 200 from Redis, one that
    needs the database answers 503; when the database returns, the same process serves again
    and the retried append is stored once."""
    key = f"cpd_{uuid.uuid4().hex}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = make_settings(tmp_path, private_postgres.url, redis_url, port=port, default_api_key=key)
    api = _api(settings, tmp_path / "api.log")
    res = Resources.build(settings)
    auth = {"Authorization": f"Bearer {key}"}
    try:
        tenant = tenant_for_key(res.engine, key)
        assert tenant is not None
        for sid in ("cached", "uncached"):
            for n in range(3):
                r = httpx.post(
                    f"{base}/v1/sessions/{sid}/turns", json={"messages": _messages(n, sid)}, headers=auth
                )
                assert r.status_code == 200, r.text
        row = get_session(res.engine, tenant, "cached")
        assert jobs.compact(tenant, row.id, row.version, res) == "published"
        before = httpx.get(f"{base}/v1/sessions/cached/prompt", headers=auth)
        assert before.status_code == 200
        assert httpx.get(f"{base}/v1/sessions/uncached/prompt", headers=auth).status_code == 200
        res.engine.dispose()

        private_postgres.stop()
        retry = {"Authorization": f"Bearer {key}", "Idempotency-Key": "during-outage"}
        extra = {"messages": [{"role": "user", "content": "appended around the outage"}]}
        down = httpx.post(f"{base}/v1/sessions/cached/turns", json=extra, headers=retry, timeout=30)
        served = httpx.get(f"{base}/v1/sessions/cached/prompt", headers=auth, timeout=30)
        uncached = httpx.get(f"{base}/v1/sessions/uncached/prompt", headers=auth, timeout=30)
        private_postgres.start()

        assert down.status_code == 503, down.text
        assert down.headers["retry-after"] == "1"
        assert down.headers["content-type"] == "application/problem+json"
        assert "database" in down.json()["detail"] and "Traceback" not in down.text
        assert served.status_code == 200 and served.content == before.content
        assert uncached.status_code == 503 and uncached.headers["retry-after"] == "1"

        # recovers by itself: the same process, the same request, until it is stored
        def stored() -> httpx.Response | None:
            r = httpx.post(f"{base}/v1/sessions/cached/turns", json=extra, headers=retry, timeout=30)
            assert r.status_code in (200, 503), r.text
            return r if r.status_code == 200 else None

        again = wait_for(stored, 30, 0.5)
        assert (again.json()["first_seq"], again.json()["last_seq"]) == (7, 7)
        assert wait_for(lambda: stored(), 10).json()["first_seq"] == 7  # a retry stores nothing more
        after = httpx.get(f"{base}/v1/sessions/cached/prompt", headers=auth).json()
        assert after["version"] == 7 and "appended around the outage" in _texts(after)
        assert httpx.get(f"{base}/v1/sessions/uncached/prompt", headers=auth).status_code == 200
        with read_tx(res.engine) as conn:
            texts = [t.content[0]["text"] for t in load_turns(conn, row.id)]
        assert texts.count("appended around the outage") == 1 and len(texts) == 7
    finally:
        api.stop()
        res.close()
        flush_prefix(redis_url, settings.redis_prefix)


def test_an_unreachable_redis_opens_the_breaker_and_calls_skip_it() -> None:
    """A cache whose Redis refuses connections answers "nothing cached" and opens its breaker;
    while it is open every call answers its default without trying Redis."""
    cache = Cache(make_redis(f"redis://127.0.0.1:{free_port()}/0"), "t:", cooldown_seconds=60)
    assert cache.available
    assert cache.prompts.get(1) is None
    assert not cache.available
    started = time.perf_counter()
    assert (
        cache.claims.claim_job(1, 1.0) is None
        and cache.prompts.position(1) is None
        and cache.counters.totals() == {}
    )
    assert cache.prompts.noted_version(1) is None
    assert time.perf_counter() - started < 0.25  # skipped, not even a refused connection


def test_a_redis_error_reply_does_not_open_the_breaker(redis_url: str) -> None:
    """An error the server answers with (here WRONGTYPE) is not an outage: the breaker stays closed."""
    prefix = f"t-{uuid.uuid4().hex[:8]}:"
    cache = Cache(make_redis(redis_url), prefix)
    try:
        cache.client.set(cache.prompts.key(1), "not a hash")
        assert cache.prompts.get(1) is None
        assert cache.available
    finally:
        flush_prefix(redis_url, prefix)
        cache.client.close()


def test_counts_flushed_to_a_frozen_redis_stay_in_the_processs_view(private_redis: PrivateRedis) -> None:
    """A flush that times out (Redis frozen: the write may or may not have landed) is not sent
    again, but the process's own view while Redis does not answer still counts it: a scrape
    during the freeze shows what was served then; once Redis answers, its totals are the view."""
    client = redis.Redis.from_url(private_redis.url, socket_timeout=0.3, socket_connect_timeout=0.3)
    recorder = Recorder(client, f"t{uuid.uuid4().hex[:6]}:")
    try:
        recorder.inc("compactd_prompt_fetches", 3, ("cache",))
        assert recorder.flush()
        assert recorder.totals()[2]  # read from Redis
        private_redis.signal(signal.SIGSTOP)
        recorder.inc("compactd_prompt_fetches", 2, ("db",))
        assert not recorder.flush()  # timed out
        values, _, up = recorder.totals()
        assert not up
        fetches = ("compactd_prompt_fetches", ("cache",)), ("compactd_prompt_fetches", ("db",))
        assert [values.get(field_of(*f)) for f in fetches] == [3.0, 2.0]
    finally:
        private_redis.signal(signal.SIGCONT)
        client.close()
