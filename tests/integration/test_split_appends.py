"""A secret split across two appends (its first half stored, maybe compacted and served, before the
second arrives) is redacted on both sides: in the stored turn, in the snapshot that already holds it,
in the cache and in what is served afterwards. Real Redis, SQLite and PostgreSQL, through the HTTP API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.integration.conftest import make_settings, open_app
from tests.integration.test_planted_secrets import _database_dump, _redis_dump
from worker.flows import append as appending
from worker.flows import compact as jobs
from worker.resources import Resources
from worker.store import snapshots

pytestmark = pytest.mark.services

# neither half is a secret alone: the password is cut after `S3cretPw`, before the `@host`
BEFORE, AFTER = "Connecting to postgres://app:S3cretPw", "Extra9x@db.internal:5432/app, is that right?"
PASSWORD = "S3cretPwExtra9x"


@pytest.fixture
def service(
    tmp_path: Path, database_url: str, redis_url: str
) -> Iterator[tuple[TestClient, Resources, dict[str, str]]]:
    """The API on its own database (SQLite and PostgreSQL) and Redis prefix, and a tenant's auth header."""
    settings = make_settings(tmp_path, database_url, redis_url, idle_seconds=0.0)
    with open_app(settings, enqueue=None, raise_server_exceptions=True) as api:
        yield api.client, api.res, api.auth


def _windows(secret: str) -> list[str]:
    return [secret[i : i + 8] for i in range(len(secret) - 7)]


@pytest.mark.parametrize("compacted_between", [False, True], ids=["tail", "in-snapshot"])
def test_a_key_split_across_two_appends_is_gone_everywhere(service: Any, compacted_between: bool) -> None:
    client, res, auth = service

    def append(messages: list[dict[str, Any]]) -> None:
        r = client.post("/v1/sessions/s/turns", json={"messages": messages}, headers=auth)
        assert r.status_code == 200, r.text

    def compact() -> None:
        with res.engine.connect() as conn:
            tenant, pk, version = conn.execute(
                text("SELECT tenant_id, id, version FROM sessions WHERE client_id = 's'")
            ).one()
        jobs.compact(tenant, pk, version, res)

    append(
        [
            {"role": "user", "content": "Set the token up."},
            {"role": "assistant", "content": BEFORE},
        ]
    )
    first = client.get("/v1/sessions/s/prompt", headers=auth).text
    assert "S3cretPw" in first  # not recognisable alone: served as is until the rest arrives
    if compacted_between:
        compact()
        assert '"compacted_through":2' in client.get("/v1/sessions/s/prompt", headers=auth).text
    append([{"role": "user", "content": AFTER}])
    served = client.get("/v1/sessions/s/prompt", headers=auth).text
    compact()
    places = {
        "served": served,
        "served after compaction": client.get("/v1/sessions/s/prompt", headers=auth).text,
        "database": _database_dump(res.engine),
        "redis": _redis_dump(res.settings.redis_url, res.settings.redis_prefix),
    }
    assert "postgres://app:[REDACTED:" in served and "@db.internal:5432/app, is that" in served
    left = {where: [w for w in _windows(PASSWORD) if w in place] for where, place in places.items()}
    assert left == {where: [] for where in places}


def test_a_job_built_before_the_rewrite_does_not_publish_the_old_half(service: Any) -> None:
    """A worker loads the session, then an append rewrites the turn it loaded last (redacting the
    half secret): the job's publish loses, so the old text cannot come back in a snapshot."""
    client, res, auth = service
    first = [{"role": "user", "content": "Connect."}, {"role": "assistant", "content": BEFORE}]
    assert client.post("/v1/sessions/s/turns", json={"messages": first}, headers=auth).status_code == 200
    with res.engine.connect() as conn:
        pk = conn.execute(text("SELECT id FROM sessions WHERE client_id = 's'")).scalar_one()
    loaded = snapshots.load(res.engine, pk)
    assert loaded is not None and loaded.last_turn_hash
    later = {"messages": [{"role": "user", "content": AFTER}]}
    assert client.post("/v1/sessions/s/turns", json=later, headers=auth).status_code == 200

    def publish(last_turn_hash: str) -> bool:
        return snapshots.publish(
            res.engine, pk, epoch=0, through_seq=2, tokens=1, memory_version=0,
            state={}, prompt={}, report={}, last_turn_hash=last_turn_hash,
        )  # fmt: skip

    assert publish(loaded.last_turn_hash) is False
    reloaded = snapshots.load(res.engine, pk)
    assert reloaded is not None and reloaded.snapshot is None  # nothing was published
    with res.engine.connect() as conn:
        assert publish(snapshots.turn_hash(conn, pk, 2)) is True


def test_a_compaction_that_read_the_old_turn_does_not_bring_it_back(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race end to end: a worker job loads the session, the second half is appended (the stored
    turn rewritten) while it computes, and the job's snapshot is refused; the next job publishes
    the redacted turn."""
    client, res, auth = service
    first = [{"role": "user", "content": "Connect."}, {"role": "assistant", "content": BEFORE}]
    assert client.post("/v1/sessions/s/turns", json={"messages": first}, headers=auth).status_code == 200
    with res.engine.connect() as conn:
        tenant, pk = conn.execute(text("SELECT tenant_id, id FROM sessions WHERE client_id = 's'")).one()
    real_load = snapshots.load

    def load_then_append(*args: Any, **kwargs: Any) -> Any:
        loaded = real_load(*args, **kwargs)  # the job has read the turn with the first half
        later = {"messages": [{"role": "user", "content": AFTER}]}
        assert client.post("/v1/sessions/s/turns", json=later, headers=auth).status_code == 200
        return loaded

    monkeypatch.setattr(snapshots, "load", load_then_append)
    assert jobs.compact(tenant, pk, 2, res) == "stale"
    monkeypatch.setattr(snapshots, "load", real_load)
    assert jobs.compact(tenant, pk, 3, res) == "published"
    served = client.get("/v1/sessions/s/prompt", headers=auth).text
    places = {"served": served, "database": _database_dump(res.engine)}
    assert "postgres://app:[REDACTED:" in served
    assert {w: [p for p, t in places.items() if w in t] for w in _windows(PASSWORD)} == {
        w: [] for w in _windows(PASSWORD)
    }


TOKEN = "ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH"


def _turns(res: Resources) -> list[str]:
    with res.engine.connect() as conn:
        return [row[0] for row in conn.execute(text("SELECT content FROM turns ORDER BY seq")).all()]


def test_an_offloaded_output_that_ends_with_half_a_key_takes_the_rest_from_the_next_append(
    service: Any,
) -> None:
    """The stored message is an output offloaded to a virtual file, so its text ends with the
    pointer, not the half key: the boundary is scanned with the file's end. The new message loses
    the rest; the stored preview and pointer stay as they are (the file keeps its half, README)."""
    client, res, auth = service
    output = "\n".join(f"{i:05d} resolving dependency graph: ok" for i in range(3000))
    unit = [
        {"role": "user", "content": "Show the environment."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_env", "name": "Bash", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_env",
                    "content": f"{output}\nGH_TOKEN={TOKEN[:14]}",
                }
            ],
        },
    ]
    assert client.post("/v1/sessions/s/turns", json={"messages": unit}, headers=auth).status_code == 200
    stored_output = _turns(res)[-1]
    assert "compactd: offloaded" in stored_output  # the premise: the output went to a file
    rest = {"messages": [{"role": "assistant", "content": f"{TOKEN[14:]} is the CI token"}]}
    assert client.post("/v1/sessions/s/turns", json=rest, headers=auth).status_code == 200
    turns = _turns(res)
    assert TOKEN[14:] not in turns[-1] and "[REDACTED:" in turns[-1] and "is the CI token" in turns[-1]
    assert turns[-2] == stored_output


def test_an_append_that_came_between_the_read_and_the_write_is_not_cut_against_a_stale_turn(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append reads the stored message it follows, then another append lands before its
    transaction: it is ingested again against the new last message, so it neither keeps a cut made
    against the old one nor cuts the newcomer's words (`Working on it.` stays whole)."""
    client, res, auth = service
    jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    first = {"messages": [{"role": "user", "content": f"The header: {jwt[:17]}"}]}
    assert client.post("/v1/sessions/s/turns", json=first, headers=auth).status_code == 200
    real_read = appending.last_message
    reads = []

    def read_then_another_append(*args: Any) -> Any:
        stored = real_read(*args)
        reads.append(stored)
        if len(reads) == 1:  # the outer append has read; another lands before it writes
            between = {"messages": [{"role": "assistant", "content": "Working on it."}]}
            assert client.post("/v1/sessions/s/turns", json=between, headers=auth).status_code == 200
        return stored

    monkeypatch.setattr(appending, "last_message", read_then_another_append)
    outer = {"messages": [{"role": "assistant", "content": f"{jwt[17:]} is the token"}]}
    assert client.post("/v1/sessions/s/turns", json=outer, headers=auth).status_code == 200
    turns = _turns(res)
    assert len(reads) == 3  # the outer read, the one between, the outer's read again
    assert '"Working on it."' in turns[1], turns[1]
    assert turns[2].endswith('is the token"}]'), turns[2]
