"""The Celery edge with real processes: a worker publishes epochs, late results lose, beat's sweep catches lost messages."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from api.http.app import create_app
from tests.conftest import require
from tests.fakes.messages_api import FakeMessagesAPI, hang, reply
from tests.integration.conftest import Worker, flush_prefix, make_settings, wait_for
from tests.integration.realdata import claude_code_files, load_messages
from worker.compaction.model import Turn
from worker.compaction.pricing import breakpoints
from worker.compaction.validate import request_problems
from worker.flows import compact as jobs
from worker.flows.serve import fetch
from worker.resources import Resources
from worker.settings import Settings
from worker.store import sessions
from worker.store.tenants import create_tenant

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def settings(tmp_path: Path, redis_url: str) -> Iterator[Settings]:
    s = make_settings(tmp_path, f"sqlite:///{tmp_path / 'compactd.db'}", redis_url)
    yield s
    flush_prefix(redis_url, s.redis_prefix)


@pytest.fixture
def res(settings: Settings) -> Iterator[Resources]:
    r = Resources.build(settings)
    yield r
    r.close()


@pytest.fixture
def worker(settings: Settings, tmp_path: Path, res: Resources) -> Iterator[Worker]:
    w = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log")
    w.wait_ready()
    yield w
    w.stop()


def real_messages(generated: bool = True) -> list[dict]:
    """A Claude Code session of 60-400 KB (a generated one without the shared data, unless
    `generated` is False: a test tuned to the real session's token counts)."""
    files = [p for p in claude_code_files(generated) if 60_000 < p.stat().st_size < 400_000]
    require(bool(files), "needs the shared data: a Claude Code transcript of 60-400 KB")
    return load_messages(files[-1])


def text_turn(role: str, text: str) -> Turn:
    return Turn(seq=0, role=role, content=({"type": "text", "text": text},), tokens=len(text) // 4 + 1)  # type: ignore[arg-type]


def test_worker_publishes_a_new_epoch_for_a_real_transcript(
    settings: Settings, res: Resources, worker: Worker
) -> None:
    """Appending a real session past its structural trigger makes the worker publish epoch 1, and the served prompt is valid."""
    messages = real_messages()
    key = create_tenant(res.engine, "agent")[1]
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(settings)) as client:
        for m in messages:
            r = client.post(
                "/v1/sessions/real/turns", json={"messages": [m], "context_window": 10_000}, headers=auth
            )
            assert r.status_code == 200, r.text
        info = wait_for(
            lambda: (
                (i := client.get("/v1/sessions/real", headers=auth).json())["epoch"] >= 1
                and i["compacted_through"] == len(messages)
                and i
            ),
            60,
        )
        prompt = client.get("/v1/sessions/real/prompt", headers=auth).json()
    assert prompt["epoch"] >= 1 and prompt["version"] == len(messages)
    assert request_problems({"system": prompt["system"], "messages": prompt["messages"]}) == []
    assert prompt["token_count"] < info["tokens"]
    assert "session.compacted" in worker.log.read_text()


def test_a_task_whose_worker_process_dies_is_redelivered_and_completes(
    tmp_path: Path, redis_url: str
) -> None:
    """The pool process running a compaction is SIGKILLed mid-summary: the message was not acked,
    so the worker requeues it, a new process runs it again and the snapshot is published once."""
    with FakeMessagesAPI() as fake:
        fake.script(hang(120), reply("NOTE-AFTER-REDELIVERY"))
        settings = make_settings(
            tmp_path,
            f"sqlite:///{tmp_path / 'compactd.db'}",
            redis_url,
            summarizer="anthropic",
            anthropic_api_key="sk-ant-test-not-a-secret",
            anthropic_base_url=fake.base_url,
            anthropic_timeout_seconds=120,
            anthropic_max_retries=0,
            lock_seconds=2,
        )
        res = Resources.build(settings)
        worker = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log")
        try:
            worker.wait_ready()
            key = create_tenant(res.engine, "dies")[1]
            auth = {"Authorization": f"Bearer {key}"}
            with TestClient(create_app(settings)) as client:
                body = {"messages": real_messages(), "context_window": 10_000}
                assert client.post("/v1/sessions/s/turns", json=body, headers=auth).status_code == 200
                wait_for(lambda: len(fake.requests) == 1, 60)
                children = subprocess.run(
                    ["pgrep", "-P", str(worker.proc.pid)], capture_output=True, text=True, check=True
                ).stdout.split()
                assert len(children) == 1
                os.kill(int(children[0]), signal.SIGKILL)
                # usage is recorded just after the snapshot is published: wait for both
                info = wait_for(
                    lambda: (
                        (i := client.get("/v1/sessions/s", headers=auth).json())["epoch"] >= 1
                        and i.get("summarizer_usage")
                        and i
                    ),
                    90,
                )
                prompt = client.get("/v1/sessions/s/prompt", headers=auth).json()
        finally:
            worker.stop()
            res.close()
            flush_prefix(redis_url, settings.redis_prefix)
    assert len(fake.requests) == 2
    assert info["epoch"] == 1 and info["summarizer_usage"]
    assert any("NOTE-AFTER-REDELIVERY" in b.get("text", "") for m in prompt["messages"] for b in m["content"])
    assert "WorkerLostError" in worker.log.read_text()


def test_the_version_an_epoch_was_first_served_at_is_claimed_once(res: Resources) -> None:
    """The first fetch of an epoch claims `served_from` (later claims read it); an extend keeps it,
    a new epoch clears it, a fallback resets it; epoch 0 rewrote nothing: 0."""
    tid = create_tenant(res.engine, "served")[0]
    a = sessions.append_turns(res.engine, tid, "s", [text_turn("user", "first")])
    assert jobs.compact(tid, a.session_pk, a.version, res) == "published"
    prompts, pk = res.cache.prompts, a.session_pk
    assert prompts.get(pk).served_from == 0 and prompts.served_from(pk, 0) == 0
    entry = prompts.get(pk)
    later = replace(entry, epoch=1, through=entry.through + 1, served_from=None)
    assert prompts.put(pk, later)
    assert prompts.served_from(pk, 1) is None and prompts.get(pk).served_from is None  # a new epoch
    assert prompts.claim_served_from(pk, 1, 7) == 7
    assert prompts.claim_served_from(pk, 1, 9) == 7  # the first claim stands
    assert prompts.claim_served_from(pk, 0, 9) is None  # the entry is at another epoch
    assert prompts.put(pk, replace(later, through=later.through + 1))  # an extend of the same epoch
    assert prompts.served_from(pk, 1) == 7
    prompts.reset_served_from(pk, 1)  # a fallback was served
    assert prompts.served_from(pk, 1) is None and prompts.claim_served_from(pk, 1, 11) == 11


def test_a_late_result_never_overwrites_a_newer_snapshot(settings: Settings, res: Resources) -> None:
    """A publish computed from an older state loses in the DB and in the Redis cache; the served prompt keeps the newer one."""
    tid = create_tenant(res.engine, "late")[0]
    a = sessions.append_turns(res.engine, tid, "s", [text_turn("user", "first")])
    assert jobs.compact(tid, a.session_pk, a.version, res) == "published"
    old = res.cache.prompts.get(a.session_pk)
    b = sessions.append_turns(
        res.engine, tid, "s", [text_turn("assistant", "second"), text_turn("user", "third")]
    )
    assert jobs.compact(tid, b.session_pk, b.version, res) == "published"
    new = res.cache.prompts.get(b.session_pk)
    assert (old.through, new.through) == (1, 3)
    assert not res.cache.prompts.put(a.session_pk, old)  # the late cache write is refused
    # a job sent by an older append compacts the latest version: nothing left to do
    assert jobs.compact(tid, a.session_pk, a.version, res) == "current"
    assert jobs.compact(tid, b.session_pk, b.version, res) == "current"  # duplicate delivery: idempotent
    served = fetch(res.engine, res.cache, tid, "s", res.policy_for)
    body = orjson.loads(served.body)
    assert (served.source, body["compacted_through"], body["version"]) == ("cache", 3, 3)


def test_beat_sweep_compacts_a_session_whose_message_was_lost(
    settings: Settings, tmp_path: Path, res: Resources
) -> None:
    """With no compaction message sent, beat's idle sweep enqueues the session and a worker publishes it."""
    fast = settings.model_copy(update={"sweep_seconds": 1.0})
    tid = create_tenant(res.engine, "lost")[0]
    a = sessions.append_turns(res.engine, tid, "s", [text_turn("user", "nobody enqueued me")])
    worker = Worker(fast, "worker", "--concurrency=1", log=tmp_path / "worker.log")
    beat = Worker(fast, "beat", log=tmp_path / "beat.log")
    try:
        worker.wait_ready()
        row = wait_for(
            lambda: (r := sessions.get_session(res.engine, tid, "s")).compacted_through == a.version and r, 30
        )
        assert row.compacted_through == 1
        assert "sweep.enqueued" in worker.log.read_text()
    finally:
        beat.stop()
        worker.stop()


def _append_real(res: Resources, tid: int, sid: str, window: int, activity: str) -> sessions.Appended:
    from worker.ingest import ingest

    # the quiet-point test's figures (~15k tokens: past the pre-trigger, short of the deadline) are
    # those of the shared data's session
    turns = ingest(
        real_messages(generated=False), first_seq=1, redactor=res.redactor, policy=res.base_policy
    ).turns
    return sessions.append_turns(
        res.engine, tid, sid, turns, profile=sessions.Profile(context_window=window), activity=activity
    )


def _report(res: Resources, pk: int) -> dict:
    from worker.store.snapshots import load

    return orjson.loads(load(res.engine, pk).snapshot.report)


def test_a_summary_is_prepared_while_busy_and_switched_in_at_the_next_quiet_point(
    tmp_path: Path, redis_url: str
) -> None:
    """Past the pre-trigger a busy session gets its summary computed and kept pending (not served);
    once the client is idle the next job switches it in as a new epoch."""
    # 750-token clips keep the clipped prompt (~12.9k) past the trigger (0.3 x 40,808 = 12.2k), so
    # the quiet point has a summary to switch in (500-token clips leave 11.8k: nothing to switch)
    settings = make_settings(
        tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url, summarize_trigger=0.3, clip_tokens=750
    )
    res = Resources.build(settings)
    try:
        tid = create_tenant(res.engine, "quiet")[0]
        # ~15k tokens: past the pre-trigger (0.8 x 0.3 x 40,808 = 9.8k), short of the deadline (30.8k)
        a = _append_real(res, tid, "s", 50_000, "busy")
        assert jobs.compact(tid, a.session_pk, a.version, res) == "published"
        busy = _report(res, a.session_pk)
        assert busy["switch"] == "" and "Summarize" in [s["stage"] for s in busy["stages"]]
        assert res.cache.pending.state(a.session_pk) is not None
        epoch = sessions.session_info(res.engine, tid, "s")["epoch"]
        sessions.set_activity(res.engine, tid, "s", "idle")
        assert jobs.compact(tid, a.session_pk, a.version, res) == "published"
        assert _report(res, a.session_pk)["switch"] == "quiet"
        assert sessions.session_info(res.engine, tid, "s")["epoch"] == epoch + 1
        assert res.cache.pending.state(a.session_pk) is None
    finally:
        res.close()
        flush_prefix(redis_url, settings.redis_prefix)


def test_past_the_deadline_a_busy_session_switches_at_once(settings: Settings, res: Resources) -> None:
    """A busy session whose prompt is past the deadline (budget minus headroom) gets the summary now."""
    tid = create_tenant(res.engine, "deadline")[0]
    a = _append_real(res, tid, "s", 10_000, "busy")
    assert jobs.compact(tid, a.session_pk, a.version, res) == "published"
    assert _report(res, a.session_pk)["switch"] == "deadline"
    assert res.cache.counters.session_stats(a.session_pk)["switches"] == {"deadline": 1}


def test_appends_faster_than_the_idle_interval_are_always_served_within_budget(
    tmp_path: Path, redis_url: str
) -> None:
    """200 turns of a real session appended every 0.1 s (far under the 5 s idle interval) with a real worker:
    every fetch before a model call fits the budget, is a valid request and carries cache breakpoints."""
    import time

    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url, idle_seconds=5.0)
    res = Resources.build(settings)
    worker = Worker(settings, "worker", "--concurrency=2", log=tmp_path / "worker.log")
    try:
        worker.wait_ready()
        key = create_tenant(res.engine, "fast")[1]
        auth = {"Authorization": f"Bearer {key}"}
        files = [p for p in claude_code_files() if p.stat().st_size > 2_000_000]
        require(bool(files), "needs the shared data: a Claude Code session over 2 MB")
        messages = load_messages(files[0])[:200]
        served = []
        with TestClient(create_app(settings)) as client:
            for i, m in enumerate(messages):
                body = {"messages": [m], "context_window": 16_000}
                assert client.post("/v1/sessions/fast/turns", json=body, headers=auth).status_code == 200
                if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
                    served.append(client.get("/v1/sessions/fast/prompt", headers=auth).json())
                time.sleep(0.1)
        over = [
            (p["token_count"], p["budget_tokens"]) for p in served if p["token_count"] > p["budget_tokens"]
        ]
        invalid = [p["version"] for p in served if request_problems({"messages": p["messages"]})]
        assert len(served) > 50 and not over and not invalid
        # the provider caches up to explicit breakpoints: at most 4, one on the newest message
        assert all(breakpoints(p) <= 4 for p in served)
        assert all(any("cache_control" in b for b in p["messages"][-1]["content"]) for p in served)
        assert max(p["epoch"] for p in served) >= 1  # the worker kept up: epochs, not only fallbacks
    finally:
        worker.stop()
        res.close()
        flush_prefix(redis_url, settings.redis_prefix)
