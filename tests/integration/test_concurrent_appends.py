"""Concurrent appends through a real `compactd api` process (uvicorn), on SQLite and PostgreSQL:
contiguous seqs with no gap or duplicate, one turn per Idempotency-Key, keys scoped per tenant."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import httpx
import pytest
import redis
from sqlalchemy import Engine, create_engine, text

from tests.integration.conftest import PG_URL, Worker, flush_prefix, free_port, make_settings
from worker.store.db import make_engine, normalize_url, read_tx
from worker.store.sessions import get_session, load_turns
from worker.store.tenants import create_tenant, tenant_for_key

pytestmark = [pytest.mark.services, pytest.mark.slow]

WRITERS, TURNS = 20, 50


@dataclass
class Api:
    base: str
    key: str
    engine: Engine

    def turns_url(self, sid: str) -> str:
        return f"{self.base}/v1/sessions/{sid}/turns"

    def stored(self, tenant_key: str, sid: str) -> list[tuple[int, str]]:
        """(seq, text) of every stored turn of the session, in seq order."""
        row = get_session(self.engine, tenant_for_key(self.engine, tenant_key), sid)
        with read_tx(self.engine) as conn:
            return [(t.seq, t.content[0]["text"]) for t in load_turns(conn, row.id)]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[Api]:
    """One real API process per backend for this module (its start-up is most of the cost), on a
    free port over a database of its own; no worker consumes its queue."""
    tmp = tmp_path_factory.mktemp("appends")
    with ExitStack() as stack:
        if request.param == "sqlite":
            database_url = f"sqlite:///{tmp / 'compactd.db'}"
        else:
            database_url = stack.enter_context(private_schema(request.getfixturevalue("pg_schema_url")))
        key = f"cpd_{uuid.uuid4().hex}"
        port = free_port()
        settings = make_settings(tmp, database_url, redis_url, port=port, default_api_key=key)
        proc = Worker(settings, "api", log=tmp / "api.log")
        engine = make_engine(database_url)
        try:
            proc.wait_ready("api.started")
            yield Api(f"http://127.0.0.1:{port}", key, engine)
        finally:
            proc.stop()
            engine.dispose()
            flush_prefix(redis_url, settings.redis_prefix)
            redis.Redis.from_url(redis_url).delete(settings.queue)


@contextmanager
def private_schema(schema_url: str) -> Iterator[str]:
    """A PostgreSQL schema of its own (dropped afterwards), as a URL selecting it."""
    schema = f"s_{uuid.uuid4().hex[:12]}"
    admin = create_engine(normalize_url(PG_URL))
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield schema_url.rsplit("?", 1)[0] + f"?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def test_twenty_writers_get_seqs_one_to_a_thousand(api: Api) -> None:
    """20 writers x 50 single-turn appends to one session: seqs 1..1000, no gap or duplicate, every
    turn stored once, each writer's turns in the order it sent them, every answer a 200."""
    auth = {"Authorization": f"Bearer {api.key}"}

    def writer(w: int) -> list[tuple[int, int]]:
        answers = []
        with httpx.Client(headers=auth, timeout=60) as http:
            for j in range(TURNS):
                body = {"messages": [{"role": "user", "content": f"w{w} t{j}"}]}
                r = http.post(api.turns_url("shared"), json=body)
                assert r.status_code == 200, r.text
                answers.append((r.json()["first_seq"], r.json()["last_seq"]))
        return answers

    with ThreadPoolExecutor(WRITERS) as pool:
        answered = [a for answers in pool.map(writer, range(WRITERS)) for a in answers]

    assert sorted(first for first, _ in answered) == list(range(1, WRITERS * TURNS + 1))
    assert all(first == last for first, last in answered)
    stored = api.stored(api.key, "shared")
    assert [seq for seq, _ in stored] == list(range(1, WRITERS * TURNS + 1))
    texts = [text for _, text in stored]
    assert sorted(texts) == sorted(f"w{w} t{j}" for w in range(WRITERS) for j in range(TURNS))
    for w in range(WRITERS):
        mine = [int(t.split(" t")[1]) for t in texts if t.startswith(f"w{w} ")]
        assert mine == list(range(TURNS))


def test_one_idempotency_key_sent_fifty_times_at_once_stores_one_turn(api: Api) -> None:
    """50 concurrent appends with one Idempotency-Key (to a session that does not exist yet) store
    one turn, and all 50 get the same 200 answer: the session row lock serializes them, so every
    request after the first finds the key and replays its answer."""
    headers = {"Authorization": f"Bearer {api.key}", "Idempotency-Key": "once-only"}
    body = {"messages": [{"role": "user", "content": "exactly once"}]}

    def send(_: int) -> httpx.Response:
        return httpx.post(api.turns_url("idem"), json=body, headers=headers, timeout=60)

    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(send, range(50)))

    assert [r.status_code for r in answers] == [200] * 50, [r.text for r in answers if r.status_code != 200]
    assert {(r.json()["first_seq"], r.json()["last_seq"]) for r in answers} == {(1, 1)}
    assert api.stored(api.key, "idem") == [(1, "exactly once")]


def test_idempotency_keys_are_scoped_per_tenant(api: Api) -> None:
    """The same Idempotency-Key and session id from two tenants store two turns, one in each
    tenant's session; a retry by either stores nothing more."""
    _, other_key = create_tenant(api.engine, f"other-{uuid.uuid4().hex[:8]}")
    for key in (api.key, other_key, api.key, other_key):
        r = httpx.post(
            api.turns_url("same-id"),
            json={"messages": [{"role": "user", "content": "same body"}]},
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "shared-key"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.json()["first_seq"] == 1
    assert api.stored(api.key, "same-id") == [(1, "same body")]
    assert api.stored(other_key, "same-id") == [(1, "same body")]
    assert tenant_for_key(api.engine, api.key) != tenant_for_key(api.engine, other_key)
