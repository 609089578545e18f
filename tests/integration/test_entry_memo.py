"""The fetch's entry memo over HTTP (worker/cache/prompts.py EntryMemo): an API process that holds a
session's prompt entry serves the same bytes as one that reads the entry every time, before and
after the worker publishes a new one (the memo's copy is never served once Redis holds another)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.http.app import create_app
from tests.integration.conftest import flush_prefix, make_settings
from worker.cache.cache import Cache
from worker.cache.client import make_redis
from worker.cache.prompts import Entry, EntryMemo
from worker.flows import compact as jobs
from worker.store.sessions import get_session
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services


@pytest.fixture
def apps(tmp_path: Path, redis_url: str) -> Iterator[tuple[TestClient, TestClient, int, str]]:
    """Two API processes' apps on one database and Redis: with the memo, and without (0 MB)."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'm.db'}", redis_url)
    with ExitStack() as stack:
        memo, plain = (
            stack.enter_context(TestClient(create_app(s, enqueue=lambda *a: None)))
            for s in (settings, settings.model_copy(update={"prompt_memo_mb": 0}))
        )
        tid, key = create_tenant(memo.app.state.resources.engine, "memo")  # type: ignore[attr-defined]
        yield memo, plain, tid, key
    flush_prefix(redis_url, settings.redis_prefix)


def test_a_held_entry_is_served_until_a_new_one_is_published(
    apps: tuple[TestClient, TestClient, int, str],
) -> None:
    """A process holding the entry serves the bytes a process without the memo serves, before and after a
    new publish."""
    memo, plain, tid, key = apps
    auth = {"Authorization": f"Bearer {key}"}
    res = memo.app.state.resources  # type: ignore[attr-defined]

    def append_and_publish(text: str, through: int) -> None:
        turns = [{"role": "user", "content": text}, {"role": "assistant", "content": f"done: {text}"}]
        assert memo.post("/v1/sessions/s1/turns", json={"messages": turns}, headers=auth).status_code == 200
        assert jobs.compact(tid, get_session(res.engine, tid, "s1").id, through, res) == "published"

    def fetch(client: TestClient) -> bytes:
        r = client.get("/v1/sessions/s1/prompt", headers=auth)
        assert r.status_code == 200
        return r.content

    append_and_publish("run the tests", 2)
    first = fetch(memo)  # learns the key and the session's pk
    assert fetch(memo) == first  # reads the entry along with the key check, and holds it
    pk = get_session(res.engine, tid, "s1").id
    assert pk in memo.app.state.entry_memo.entries  # type: ignore[attr-defined]
    assert fetch(memo) == first == fetch(plain)  # served from the held copy: the same bytes
    held = memo.app.state.entry_memo.entries  # type: ignore[attr-defined]
    stamp_before = held[pk][0]
    append_and_publish("now fix the flaky one", 4)
    second = fetch(memo)  # Redis holds another rev: never the held copy
    assert second == fetch(plain) and b"now fix the flaky one" in second and second != first
    # the new entry came back in that fetch's one round trip and is held from there
    assert pk in held and held[pk][0] != stamp_before
    assert fetch(memo) == second


def test_the_stamp_check_runs_in_redis(redis_url: str) -> None:
    """The memo's conditional read against real Redis: 1 while the entry keeps the held copy's
    stamp (a claim of `served_from` leaves it: the copy learns the value); the whole entry once any
    write moved it (a publish, a reset of `served_from`, a writer that predates the rev and left it
    as it was); every field nil once the entry is gone."""
    cache = Cache(make_redis(redis_url), f"test-memo-{uuid.uuid4().hex[:8]}:")
    memo, prompts, r = EntryMemo(1 << 20), cache.prompts, cache.client
    key = prompts.key(1)

    def ask() -> object:
        reply = r.execute_command(*memo.read(prompts, 1))
        return memo.answer(1, reply)

    try:
        first = Entry(1, 2, 0, b"[]", b'{"a":1}', b"", 10)
        assert prompts.put(1, first)
        assert ask() == first and r.execute_command(*memo.read(prompts, 1)) == 1
        assert prompts.claim_served_from(1, 1, 5) == 5
        assert r.execute_command(*memo.read(prompts, 1)) == 1  # the stamp held
        prompts.reset_served_from(1, 1)
        assert ask() == first  # read again whole: its served_from gone
        assert prompts.claim_served_from(1, 1, 6) == 6
        r.hset(key, mapping={"through": 4, "head": b'{"b":2}'})  # an older worker: rev untouched
        assert ask() == replace(first, through=4, head=b'{"b":2}', served_from=6)
        r.delete(key)
        assert ask() is None and memo.read(prompts, 1)[0] == "HMGET"
    finally:
        r.delete(key)
        r.close()
