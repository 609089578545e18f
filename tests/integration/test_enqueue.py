"""`compactd.append` from another service: a separate process on the same Redis, real worker and API processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.factories import user
from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings, wait_for
from tests.services import PrivatePostgres
from worker.flows.append import rejections
from worker.resources import Resources, broker_url
from worker.settings import Settings
from worker.store.sessions import get_session
from worker.store.tenants import create_tenant, tenant_for_key

pytestmark = [pytest.mark.services]

# Celery's log line when a worker takes a message
RECEIVED = re.compile(r"compactd\.append\[[0-9a-f-]+\] received")
SECRET = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"

# A service that is not compactd: its own Celery app, no compactd import, only the broker URL.
SENDER = textwrap.dedent(
    """
    import json, sys
    from celery import Celery

    broker, queue = sys.argv[1], sys.argv[2]
    app = Celery("other-service", broker=broker)
    app.conf.update(task_serializer="json", accept_content=["json"])
    for kwargs in json.load(sys.stdin):
        # kwargsrepr: the API key and the raw turns stay out of Celery's events and logs
        app.send_task("compactd.append", kwargs=kwargs, queue=queue, kwargsrepr="<append>")
    """
)


def send_from_other_process(settings: Settings, tmp_path: Path, messages: list[dict[str, Any]]) -> None:
    """Send `compactd.append` messages from a separate Python process with its own Celery app."""
    script = tmp_path / "sender.py"
    script.write_text(SENDER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTD_", "PYTHONPATH"))}
    done = subprocess.run(
        [sys.executable, str(script), broker_url(settings), settings.queue],
        input=json.dumps(messages),
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository: nothing of compactd is importable by path
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


# One API and one worker for the module (each start loads the redaction rules): tests use
# sessions of their own, and the test that kills a pool process runs last.
@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Settings]:
    tmp_path = tmp_path_factory.mktemp("enqueue")
    key = f"cpd_{uuid.uuid4().hex}"
    s = make_settings(
        tmp_path, f"sqlite:///{tmp_path / 'compactd.db'}", redis_url, port=free_port(), default_api_key=key
    )
    yield s
    flush_prefix(redis_url, s.redis_prefix)


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[httpx.Client]:
    proc = Worker(settings, "api", log=settings.var_dir.parent / "api.log")
    proc.wait_ready("api.started", timeout=120)
    headers = {"Authorization": f"Bearer {settings.default_api_key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.port}", headers=headers, timeout=30) as client:
        yield client
    proc.stop()


@pytest.fixture(scope="module")
def worker(settings: Settings, api: httpx.Client) -> Iterator[Worker]:
    w = Worker(settings, "worker", "--concurrency=1", log=settings.var_dir.parent / "worker.log")
    w.wait_ready(timeout=120)
    yield w
    w.stop()


@pytest.fixture(scope="module")
def res(settings: Settings, api: httpx.Client) -> Iterator[Resources]:
    r = Resources.build(settings, run_migrations=False)
    yield r
    r.close()


def texts(prompt: dict[str, Any]) -> str:
    return json.dumps(prompt["messages"])


def test_a_turn_sent_by_another_process_appears_in_the_next_fetch(
    settings: Settings, tmp_path: Path, api: httpx.Client, worker: Worker
) -> None:
    """A service with its own Celery app sends compactd.append; the turn, redacted, is in the next prompt fetched over HTTP."""
    api.post("/v1/sessions/s1/turns", json={"messages": [user("start")]}).raise_for_status()
    api.post(
        "/v1/sessions/s1/turns", json={"messages": [{"role": "assistant", "content": "ready"}]}
    ).raise_for_status()
    send_from_other_process(
        settings,
        tmp_path,
        [
            {
                "api_key": settings.default_api_key,
                "session_id": "s1",
                "idempotency_key": "other-1",
                "body": {"messages": [user(f"from the other service, token {SECRET}")]},
            }
        ],
    )
    prompt = wait_for(
        lambda: (p := api.get("/v1/sessions/s1/prompt").json())["version"] == 3 and p, timeout=60
    )
    assert "from the other service" in texts(prompt)
    assert SECRET not in texts(prompt) and "[REDACTED:github_token:" in texts(prompt)
    # the turn is committed (and fetchable) before the worker records metrics and logs it
    wait_for(lambda: "append.appended" in worker.log.read_text(), timeout=10)


def test_one_idempotency_key_over_http_and_the_task_stores_one_turn(
    settings: Settings, tmp_path: Path, api: httpx.Client, worker: Worker, res: Resources
) -> None:
    """The same Idempotency-Key sent over HTTP and then through compactd.append stores the turn once."""
    body = {"messages": [user("exactly once")]}
    r = api.post("/v1/sessions/s2/turns", json=body, headers={"Idempotency-Key": "same-key"})
    assert r.status_code == 200 and r.json()["last_seq"] == 1
    message = {
        "api_key": settings.default_api_key,
        "session_id": "s2",
        "idempotency_key": "same-key",
        "body": body,
    }
    send_from_other_process(settings, tmp_path, [message, message])
    wait_for(lambda: worker.log.read_text().count("append.replayed") == 2, timeout=60)
    tenant = tenant_for_key(res.engine, settings.default_api_key or "")
    assert get_session(res.engine, tenant, "s2").version == 1
    assert api.get("/v1/sessions/s2/prompt").json()["version"] == 1


def test_rejected_messages_are_recorded_once_and_write_nothing(
    settings: Settings, tmp_path: Path, api: httpx.Client, worker: Worker, res: Resources
) -> None:
    """A bad key, a broken conversation and a malformed message are each logged, recorded once with a reason, and store nothing."""
    key = settings.default_api_key
    orphan = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}
    send_from_other_process(
        settings,
        tmp_path,
        [
            {"api_key": "cpd_wrong", "session_id": "r1", "body": {"messages": [user("hi")]}},
            {"api_key": key, "session_id": "r2", "body": {"messages": [orphan]}},
            {"api_key": key, "session_id": "r3 bad", "body": {"messages": []}, "extra": SECRET},
        ],
    )
    records = wait_for(lambda: len(found := rejections(res)) >= 3 and found, timeout=60)
    by_session = {r["session_id"]: r for r in records}
    assert by_session["r1"]["reason"] == "unknown API key" and by_session["r1"]["tenant_id"] is None
    assert "invalid Anthropic conversation" in by_session["r2"]["reason"]
    assert by_session["r2"]["tenant_id"] is not None and by_session["r2"]["problems"]
    bad = by_session["r3 bad"]
    assert {p.split(":")[0] for p in bad["problems"]} == {"session_id", "body.messages", "extra"}
    assert SECRET not in json.dumps(records) and SECRET not in worker.log.read_text()
    for sid in ("r1", "r2", "r3 bad"):
        assert api.get(f"/v1/sessions/{sid}/prompt").status_code in (404, 422)
    log = worker.log.read_text()
    assert log.count("append.rejected") == 3
    # done, not retried: nothing waits in the queue and no rejection is recorded twice
    assert res.cache.client.llen(settings.queue) == 0
    assert len(rejections(res)) == 3


def pairs(key: str, sid: str, count: int) -> list[dict[str, Any]]:
    """`count` messages, each an assistant turn and the user's answer, so any order is a valid
    conversation; every third one, the first included, is ~4 MB (redaction keeps its task busy
    for a while, so a kill soon after the first is received lands mid-task)."""
    big = "lorem ipsum dolor sit amet " * 150_000
    return [
        {
            "api_key": key,
            "session_id": sid,
            "body": {
                "messages": [{"role": "assistant", "content": big if i % 3 == 0 else f"a{i}"}, user(f"u{i}")]
            },
        }
        for i in range(count)
    ]


def prompt_at(http: httpx.Client, sid: str, version: int, timeout: float) -> dict[str, Any]:
    """The session's served prompt once its version reaches `version` (it may pass it)."""
    return wait_for(
        lambda: (
            (r := http.get(f"/v1/sessions/{sid}/prompt")).status_code == 200
            and r.json()["version"] >= version
            and r.json()
        ),
        timeout=timeout,
        interval=0.2,
    )


def pool_children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_an_append_whose_worker_process_is_killed_is_stored_once_after_redelivery(
    settings: Settings, tmp_path: Path, api: httpx.Client, worker: Worker
) -> None:
    """The pool process running an enqueued append is SIGKILLed: the message was not acked, so it
    is redelivered, and the turns that were queued behind it are stored too, each once."""
    # a kill can land between tasks (each append takes well under a second): try again with a new
    # session until one lands mid-task; every round must still store each message exactly once
    for attempt in range(5):
        sid = f"k{attempt}"
        api.post(f"/v1/sessions/{sid}/turns", json={"messages": [user("start")]}).raise_for_status()
        seen = len(worker.log.read_text())
        send_from_other_process(settings, tmp_path, pairs(settings.default_api_key or "", sid, 11))
        wait_for(lambda seen=seen: RECEIVED.search(worker.log.read_text()[seen:]), timeout=30, interval=0.02)
        for child in pool_children(worker.proc.pid):
            os.kill(child, signal.SIGKILL)
        prompt = prompt_at(api, sid, 23, timeout=90)
        assert prompt["version"] == 23
        if "WorkerLostError" in worker.log.read_text()[seen:]:
            break
    assert "WorkerLostError" in worker.log.read_text(), "no kill landed while an append was running"


@contextmanager
def short_limit_service(tmp_path: Path, redis_url: str) -> Iterator[tuple[Settings, httpx.Client]]:
    """An API process of this test's own with a 13 s task limit (soft limit 3 s: a ~4 MB append
    takes ~0.8 s on an idle 2-core machine, so it fits 3 s under the load of a parallel test run,
    where a 1 s soft limit cut it off four times and rejected it), and a client holding its key."""
    key = f"cpd_{uuid.uuid4().hex}"
    settings = make_settings(
        tmp_path,
        f"sqlite:///{tmp_path / 'compactd.db'}",
        redis_url,
        port=free_port(),
        default_api_key=key,
        task_time_limit_seconds=13,
    )
    api_proc = Worker(settings, "api", log=tmp_path / "api.log")
    try:
        api_proc.wait_ready("api.started", timeout=120)
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{settings.port}", headers=auth) as http:
            yield settings, http
    finally:
        api_proc.stop()
        flush_prefix(redis_url, settings.redis_prefix)


@pytest.mark.slow
def test_queued_appends_survive_a_killed_worker_and_land_after_a_new_one_starts(
    tmp_path: Path, redis_url: str
) -> None:
    """Appends queued and in flight when the whole worker is SIGKILLed are all stored, once, after
    a new worker starts (the in-flight one after the broker's visibility timeout)."""
    with short_limit_service(tmp_path, redis_url) as (settings, http):
        key = settings.default_api_key or ""
        http.post("/v1/sessions/w/turns", json={"messages": [user("start")]}).raise_for_status()
        send_from_other_process(settings, tmp_path, pairs(key, "w", 31))
        first = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker1.log")
        second = None
        try:
            first.wait_ready(timeout=120)
            wait_for(lambda: RECEIVED.search(first.log.read_text()), timeout=30, interval=0.02)
            for pid in [*pool_children(first.proc.pid), first.proc.pid]:
                os.kill(pid, signal.SIGKILL)
            first.proc.wait()
            # the new worker redelivers what was left unacked after 15 s, not the shipped ~70 s (the
            # killed one keeps the shipped sweep: killed while holding the sweep's lock, it would
            # hold up every sweep for the lock's 5 minutes)
            second = Worker(
                settings, "worker", "--concurrency=1", log=tmp_path / "worker2.log", visibility=15
            )
            second.wait_ready(timeout=120)
            prompt = prompt_at(http, "w", 63, timeout=150)
            assert prompt["version"] == 63
        finally:
            for proc in (first, second):
                if proc is not None:
                    proc.stop()


@pytest.mark.slow
def test_an_append_cut_off_by_the_soft_time_limit_is_retried_and_stored_once(
    tmp_path: Path, redis_url: str
) -> None:
    """The pool process is frozen (SIGSTOP) past the soft time limit while it runs an append: the
    append rolls back and is tried again, so every message is stored once (a clean-clone CI run
    lost one: a cold process's first ~4 MB append outran a 1 s soft limit and was dropped). A
    freeze that lands while the pool process still decodes the message requeues it (another
    clean-clone run lost one that way: Celery acked the `DecodeError(SoftTimeLimitExceeded())`)."""
    with short_limit_service(tmp_path, redis_url) as (settings, http):
        key = settings.default_api_key or ""
        worker = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log")
        try:
            worker.wait_ready(timeout=120)
            # a freeze can land between tasks: try again with a new session until one lands mid-task
            for attempt in range(5):
                sid = f"s{attempt}"
                http.post(f"/v1/sessions/{sid}/turns", json={"messages": [user("start")]}).raise_for_status()
                seen = len(worker.log.read_text())
                send_from_other_process(settings, tmp_path, pairs(key, sid, 4))
                wait_for(
                    lambda seen=seen: RECEIVED.search(worker.log.read_text()[seen:]),
                    timeout=30,
                    interval=0.02,
                )
                children = pool_children(worker.proc.pid)
                for child in children:
                    os.kill(child, signal.SIGSTOP)
                time.sleep(4.0)  # past the 3 s soft limit
                for child in children:
                    os.kill(child, signal.SIGCONT)
                prompt = prompt_at(http, sid, 9, timeout=90)
                assert prompt["version"] == 9
                if "append.soft_time_limit" in worker.log.read_text()[seen:]:
                    break
            log = worker.log.read_text()
            assert "append.soft_time_limit" in log, "no freeze landed while an append was running"
            assert "append.rejected" not in log
        finally:
            worker.stop()


@pytest.mark.slow
def test_an_append_waits_out_a_database_outage_longer_than_celerys_default_retries(
    tmp_path: Path, redis_url: str
) -> None:
    """The database is down past the point where Celery's default (3 retries) gives up: the append
    is retried a fourth time and is stored once when the database returns (it was dropped,
    unrecorded)."""
    server = PrivatePostgres()
    settings = make_settings(tmp_path, server.url, redis_url)
    res = Resources.build(settings)
    tenant, key = create_tenant(res.engine, "outage")
    res.close()
    worker = Worker(settings, "worker", "--concurrency=1", log=tmp_path / "worker.log")
    try:
        worker.wait_ready(timeout=120)
        server.stop()
        send_from_other_process(
            settings, tmp_path, [{"api_key": key, "session_id": "o", "body": {"messages": [user("hi")]}}]
        )
        # Celery's default gives up instead of scheduling a fourth retry: wait for that fourth (7 s in)
        wait_for(lambda: worker.log.read_text().count("retry: Retry in") >= 4, timeout=90, interval=0.2)
        server.start()
        res = Resources.build(settings, run_migrations=False)
        row = wait_for(lambda: get_session(res.engine, tenant, "o"), timeout=120, interval=0.5)
        assert row.version == 1
        res.close()
        assert "append.rejected" not in worker.log.read_text()
    finally:
        worker.stop()
        server.remove()
        flush_prefix(redis_url, settings.redis_prefix)


def test_the_apis_enqueue_is_one_claim_and_one_message(tmp_path: Path) -> None:
    """A job from the API is its claim and one message on the queue (a worker's to take): no
    task-sent event is published beside it (the queue length gauge shows a waiting job); a second
    enqueue while the job is pending sends nothing."""
    import redis

    from tests.services import PrivateRedis
    from worker.enqueue import CeleryEnqueue

    server = PrivateRedis()
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", server.url)
    res = Resources.build(settings)
    client = redis.Redis.from_url(server.url)
    events = client.pubsub()
    try:
        events.psubscribe("*")
        assert events.get_message(timeout=1)["type"] == "psubscribe"
        with CeleryEnqueue(settings, res) as enqueue:
            enqueue(1, 42, 3)
            enqueue(1, 42, 4)
        (message,) = client.lrange(settings.queue, 0, -1)
        headers = json.loads(message)["headers"]
        assert headers["task"] == "compactd.compact" and headers["argsrepr"] == "[1, 42, 3]"
        assert events.get_message(timeout=0.5) is None
    finally:
        events.close()
        client.close()
        res.close()
        server.kill()


def test_an_append_cut_off_while_its_message_is_decoded_is_requeued_not_lost(redis_url: str) -> None:
    """The soft time limit can cut the pool process off while it still decodes an append's message
    (kombu raises `DecodeError(SoftTimeLimitExceeded())`, before the task's own handler runs):
    AppendRequest puts the message back on the real Redis queue, where Celery would ack and drop
    it; any other failure keeps Celery's handling (a decode error of its own is acked)."""
    from billiard.einfo import ExceptionInfo
    from celery.exceptions import SoftTimeLimitExceeded
    from kombu import Connection
    from kombu.exceptions import DecodeError

    from worker.celery_app import app
    from worker.tasks import AppendRequest, append

    queue = f"t-cut-{uuid.uuid4().hex[:8]}"
    url = redis_url.rsplit("/", 1)[0] + "/13"
    with Connection(url) as conn:
        box = conn.SimpleQueue(queue)
        try:
            for cause, requeued in ((SoftTimeLimitExceeded(), True), (ValueError("bad json"), False)):
                task_id = str(uuid.uuid4())
                headers, properties, body, _ = app.amqp.as_task_v2(
                    task_id, append.name, kwargs={"session_id": "s"}
                )
                box.put(body, headers=headers, serializer="json", **properties)
                message = box.get(timeout=5)
                # as the worker builds it (celery/worker/strategy.py): ack and reject are the message's
                request = AppendRequest(
                    message,
                    app=app,
                    task=append,
                    on_ack=message.ack_log_error,
                    on_reject=message.reject_log_error,
                )
                try:
                    raise DecodeError(cause)
                except DecodeError:
                    request.on_failure(ExceptionInfo(), send_failed_event=False, return_ok=True)
                if requeued:
                    again = box.get(timeout=5)
                    assert again.headers["id"] == task_id  # the same message, back on the queue
                    again.ack()
                else:
                    with pytest.raises(box.Empty):  # Celery's own handling: acked, not back
                        box.get(timeout=1)
        finally:
            box.clear()
            box.close()
