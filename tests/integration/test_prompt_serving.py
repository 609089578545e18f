"""The prompt always has every appended turn: from the cache, from the DB when Redis dies, and when the cache is stale."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.integration.conftest import answers, free_port, make_settings, open_app
from worker.flows import compact as jobs
from worker.store import snapshots
from worker.store.sessions import get_session

pytestmark = pytest.mark.services


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A private redis-server on a free port, so the test may kill it."""
    import shutil

    binary = shutil.which("redis-server")
    require(binary is not None, "redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not answers("127.0.0.1", port):
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def texts(prompt: dict) -> list[str]:
    return [b.get("text", "") for m in prompt["messages"] for b in m["content"]]


def test_prompt_survives_redis_dying_mid_session(tmp_path: Path, own_redis: tuple) -> None:
    """Served from the cache while Redis lives; after it is killed, fetches come from the DB, quickly and complete."""
    url, proc = own_redis
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", url)
    with open_app(settings, raise_server_exceptions=True) as api:
        client, res, tid, auth = api.client, api.res, api.tenant, api.auth
        for i in range(3):
            client.post(
                "/v1/sessions/s/turns",
                json={
                    "messages": [
                        {"role": "user", "content": f"turn {i}"},
                        {"role": "assistant", "content": f"reply {i}"},
                    ]
                },
                headers=auth,
            )
        pk = get_session(res.engine, tid, "s").id
        assert jobs.compact(tid, pk, 6, res) == "published"
        client.post(
            "/v1/sessions/s/turns",
            json={"messages": [{"role": "user", "content": "after snapshot"}]},
            headers=auth,
        )
        cached = client.get("/v1/sessions/s/prompt", headers=auth).json()
        proc.kill()
        proc.wait()
        client.post(
            "/v1/sessions/s/turns",
            json={
                "messages": [
                    {"role": "assistant", "content": "while redis is dead"},
                    {"role": "user", "content": "last"},
                ]
            },
            headers=auth,
        )
        started = time.perf_counter()
        dead = client.get("/v1/sessions/s/prompt", headers=auth).json()
        seconds = time.perf_counter() - started
        metrics = client.get("/metrics").text
    assert (cached["compacted_through"], cached["version"]) == (6, 7)
    assert texts(cached)[-1] == "after snapshot"  # nothing of the fetch's own after it
    assert dead["version"] == 9
    for expected in ["turn 0", "reply 2", "after snapshot", "while redis is dead", "last"]:
        assert any(t == expected for t in texts(dead)), expected
    assert seconds < 1.0
    assert 'source="cache"} 1.0' in metrics and 'source="db"} 1.0' in metrics


def test_prompt_ignores_a_cache_behind_the_db_epoch(tmp_path: Path, redis_url: str) -> None:
    """When the DB has a newer epoch than the cache, the prompt is assembled from the DB snapshot plus the tail."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url)
    with open_app(settings, raise_server_exceptions=True) as api:
        client, res, tid, auth = api.client, api.res, api.tenant, api.auth
        client.post(
            "/v1/sessions/s/turns", json={"messages": [{"role": "user", "content": "one"}]}, headers=auth
        )
        pk = get_session(res.engine, tid, "s").id
        jobs.compact(tid, pk, 1, res)
        client.post(
            "/v1/sessions/s/turns", json={"messages": [{"role": "assistant", "content": "two"}]}, headers=auth
        )
        newer = {"role": "user", "content": [{"type": "text", "text": "from the newer epoch"}]}
        state = {
            "system": "",
            "memory": "",
            "handoff": None,
            "turns": [
                {"seq": 1, "role": "user", "content": newer["content"], "tokens": 5},
                {"seq": 2, "role": "assistant", "content": [{"type": "text", "text": "two"}], "tokens": 1},
            ],
        }
        assert snapshots.publish(
            res.engine,
            pk,
            epoch=5,
            through_seq=2,
            tokens=6,
            memory_version=0,
            state=state,
            prompt={
                "system": [],
                "messages": [newer, {"role": "assistant", "content": [{"type": "text", "text": "two"}]}],
            },
            report={},
        )
        client.post(
            "/v1/sessions/s/turns", json={"messages": [{"role": "user", "content": "three"}]}, headers=auth
        )
        prompt = client.get("/v1/sessions/s/prompt", headers=auth).json()
        metrics = client.get("/metrics").text
    assert (prompt["epoch"], prompt["compacted_through"], prompt["version"]) == (5, 2, 3)
    assert texts(prompt)[:3] == ["from the newer epoch", "two", "three"]
    assert 'source="db"} 1.0' in metrics


def test_a_new_system_prompt_replaces_the_old_one_everywhere(tmp_path: Path, redis_url: str) -> None:
    """A later append with another `system`: the next fetch shows it at once (not the cached
    snapshot's), and the next compaction publishes it as a new epoch."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url)

    def system_text(prompt: dict) -> str:
        return " ".join(b["text"] for b in prompt["system"])

    with open_app(settings, raise_server_exceptions=True) as api:
        client, res, tid, auth = api.client, api.res, api.tenant, api.auth
        first = {
            "system": "You are agent ALPHA.",
            "messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
        }
        client.post("/v1/sessions/s/turns", json=first, headers=auth)
        pk = get_session(res.engine, tid, "s").id
        assert jobs.compact(tid, pk, 2, res) == "published"
        before = client.get("/v1/sessions/s/prompt", headers=auth).json()
        # the same system again changes nothing; another one replaces it
        client.post(
            "/v1/sessions/s/turns",
            json={"system": "You are agent BETA.", "messages": [{"role": "user", "content": "three"}]},
            headers=auth,
        )
        changed = client.get("/v1/sessions/s/prompt", headers=auth).json()
        assert jobs.compact(tid, pk, 3, res) == "published"
        published = client.get("/v1/sessions/s/prompt", headers=auth).json()
    assert "ALPHA" in system_text(before) and before["epoch"] == 0
    for prompt in (changed, published):
        assert "BETA" in system_text(prompt) and "ALPHA" not in system_text(prompt)
        assert [t for t in texts(prompt) if t in ("one", "two", "three")] == ["one", "two", "three"]
    assert published["epoch"] == before["epoch"] + 1 and published["compacted_through"] == 3


def test_a_file_read_changes_nothing_the_agent_is_served(tmp_path: Path, redis_url: str) -> None:
    """Reading a virtual file back through the files API leaves the served prompt as it was, byte
    for byte and from the cache: a fetch adds nothing it would take back at the next one."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url)
    big = "\n".join(f"line {i}: value {i * 7}" for i in range(6_000))
    call = {"type": "tool_use", "id": "toolu_big", "name": "Bash", "input": {"command": "seq"}}
    with open_app(settings, raise_server_exceptions=True) as api:
        client, res, tid, auth = api.client, api.res, api.tenant, api.auth
        messages = [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": [call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_big", "content": big}],
            },
        ]
        client.post("/v1/sessions/s/turns", json={"messages": messages}, headers=auth)
        pk = get_session(res.engine, tid, "s").id
        assert jobs.compact(tid, pk, 3, res) == "published"
        ref = client.get("/v1/sessions/s/files", headers=auth).json()["files"][0]["ref"]
        unread = client.get("/v1/sessions/s/prompt", headers=auth).content
        read_back = client.get(f"/v1/sessions/s/files/{ref}?start_line=10&end_line=12", headers=auth)
        read = client.get("/v1/sessions/s/prompt", headers=auth).content
        metrics = client.get("/metrics").text
    assert read_back.status_code == 200 and "line 10: value 70" in read_back.json()["text"]
    assert ref in unread.decode() and read == unread
    assert 'source="cache"} 2.0' in metrics and 'source="db"' not in metrics


def test_a_fit_fallback_keeps_the_pinned_memory_block_and_the_memory_notes(
    tmp_path: Path, redis_url: str
) -> None:
    """No worker has run since a big tool result: the fetch's fit clips it and serves the memory
    block the snapshot pinned (none before the first summary: the start of the provider's cached
    prefix), with the memory changes in the memory note the newest user turn was appended with,
    not a block rendered afresh."""
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", redis_url)

    def unit(n: int, output: str) -> list[dict]:
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"make step{n}"}}
        done = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": output}
        return [{"role": "assistant", "content": [call]}, {"role": "user", "content": [done]}]

    with open_app(settings, raise_server_exceptions=True) as api:
        client, res, tid, auth = api.client, api.res, api.tenant, api.auth
        first = {
            "context_window": 8_000,
            "messages": [{"role": "user", "content": "Fix the parser."}, *unit(0, "ok")],
        }
        assert client.post("/v1/sessions/s/turns", json=first, headers=auth).status_code == 200
        pk = get_session(res.engine, tid, "s").id
        assert jobs.compact(tid, pk, 3, res) == "published"
        pinned = client.get("/v1/sessions/s/prompt", headers=auth).json()["system"]
        ops = [{"op": "set", "section": "task", "value": "Fix the parser in src/parse.py"}]
        ops += [{"op": "add", "section": "important_files", "value": "src/lexer.py", "seq": 3}]
        ops += [
            {"op": "add", "section": "decisions", "value": f"decision {i}: keep lexer rule {i} as it is"}
            for i in range(20)
        ]
        assert client.patch("/v1/sessions/s/memory", json={"ops": ops}, headers=auth).status_code == 200
        log = "\n".join(f"line {i}: checked token stream offset {i * 7}" for i in range(700))
        later = [*unit(1, log), *unit(2, "ok"), *unit(3, "ok")]
        assert client.post("/v1/sessions/s/turns", json={"messages": later}, headers=auth).status_code == 200
        served = client.get("/v1/sessions/s/prompt", headers=auth).json()
    assert served["fallback"] == "fit" and served["token_count"] <= served["budget_tokens"]
    assert served["system"] == pinned and "src/parse.py" not in str(pinned)
    note = served["messages"][-1]["content"][-1]["text"]
    assert note.startswith("<compactd-memory>") and "src/lexer.py" in note
    assert "decision 19: keep lexer rule 19" in note
