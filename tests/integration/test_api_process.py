"""A real `compactd api` process (uvicorn) under concurrent appends: contiguous seqs, every compaction enqueued."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis

from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings, wait_for
from worker.store.db import make_engine, read_tx
from worker.store.sessions import get_session, load_turns
from worker.store.tenants import tenant_for_key

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_concurrent_appends_over_http_get_contiguous_seqs(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Eight clients appending to one session at once through uvicorn get seqs 1..n, and the 81
    appends leave exactly one compaction job pending (coalesced: never more than one per session)."""
    key = f"cpd_{uuid.uuid4().hex}"
    port = free_port()
    settings = make_settings(tmp_path, pg_url, redis_url, port=port, default_api_key=key)
    api = Worker(settings, "api", log=tmp_path / "api.log")
    errors: list[str] = []
    try:
        api.wait_ready("api.started")
        url = f"http://127.0.0.1:{port}/v1/sessions/shared/turns"
        auth = {"Authorization": f"Bearer {key}"}
        httpx.post(
            url, json={"messages": [{"role": "user", "content": "start"}]}, headers=auth
        ).raise_for_status()

        def client(i: int) -> None:
            with httpx.Client(headers=auth, timeout=30) as http:
                for j in range(10):
                    body = {
                        "messages": [
                            {"role": "assistant", "content": f"{i}.{j}"},
                            {"role": "user", "content": "ok"},
                        ]
                    }
                    r = http.post(url, json=body)
                    if r.status_code != 200:
                        errors.append(r.text)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        engine = make_engine(pg_url)
        row = get_session(engine, tenant_for_key(engine, key), "shared")
        with read_tx(engine) as conn:
            assert [t.seq for t in load_turns(conn, row.id)] == list(range(1, 162))
        engine.dispose()
        queued = redis.Redis.from_url(redis_url)
        # no worker consumes this test's queue: the first append's job is still pending
        assert wait_for(lambda: queued.llen(settings.queue) >= 1, 10)
        time.sleep(0.5)
        assert queued.llen(settings.queue) == 1
        queued.close()
    finally:
        api.stop()
        flush_prefix(redis_url, settings.redis_prefix)
        redis.Redis.from_url(redis_url).delete(settings.queue)


@pytest.mark.parametrize("signals", [["SIGINT"], ["SIGINT", "SIGTERM"]], ids=["ctrl-c", "ctrl-c-then-up"])
def test_ctrl_c_stops_the_api_quietly(tmp_path: Path, redis_url: str, signals: list[str]) -> None:
    """Ctrl-C reaches every process of the terminal's group, `compactd up`'s API child included (and
    `up` then sends it SIGTERM): the API shuts down, exits 0, and prints no traceback."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url, port=free_port())
    api = Worker(settings, "api", log=tmp_path / "api.log")
    try:
        api.wait_ready("api.started")
        for name in signals:
            api.proc.send_signal(getattr(signal, name))
        assert api.proc.wait(timeout=30) == 0
    finally:
        api.stop()
    log = (tmp_path / "api.log").read_text(errors="replace")
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-2000:]
