"""User-driven compaction (POST /compact with focus) and per-session cache-reuse accounting, on real Redis and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from fastapi.testclient import TestClient

from tests.integration.conftest import make_settings, open_app, wait_for
from worker.compaction.prefixes import extends
from worker.flows import compact as jobs
from worker.resources import Resources
from worker.settings import Settings
from worker.store.snapshots import load

pytestmark = [pytest.mark.services]
FOCUS_SECRET = "AKIAIOSFODNN7EXAMPLF"


@pytest.fixture
def settings(tmp_path: Path, redis_url: str) -> Settings:
    return make_settings(tmp_path, f"sqlite:///{tmp_path / 'compactd.db'}", redis_url, idle_seconds=0.0)


@pytest.fixture
def client(
    settings: Settings,
) -> Iterator[tuple[TestClient, dict[str, str], list[tuple[int, int, int]], Resources]]:
    with open_app(settings, raise_server_exceptions=True) as api:
        yield api.client, api.auth, api.enqueued, api.res  # type: ignore[misc]


def unit(n: int, body: str) -> list[dict]:
    return [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": f"toolu_{n:03d}",
                    "name": "Bash",
                    "input": {"command": f"make step{n}"},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n:03d}", "content": body}],
        },
    ]


def append(c: TestClient, auth: dict[str, str], messages: list[dict]) -> None:
    r = c.post("/v1/sessions/s/turns", json={"messages": messages, "context_window": 200_000}, headers=auth)
    assert r.status_code == 200, r.text


def test_compact_request_summarizes_below_the_trigger_with_the_redacted_focus(client) -> None:  # type: ignore[no-untyped-def]
    """A /compact on a small session yields a handoff note naming the focus; a secret in the focus is redacted."""
    c, auth, sent, res = client
    append(c, auth, [{"role": "user", "content": "Port the parser to Rust."}])
    for n in range(12):
        append(c, auth, unit(n, f"step {n} output\n" * 30))
    r = c.post(
        "/v1/sessions/s/compact", json={"focus": f"keep the parser API; key {FOCUS_SECRET}"}, headers=auth
    )
    assert r.status_code == 202 and r.json()["status"] == "queued"
    tenant, pk, version = sent[-1]
    assert jobs.compact(tenant, pk, version, res) == "published"
    prompt = c.get("/v1/sessions/s/prompt", headers=auth).json()
    text = str(prompt["messages"])
    assert "[compactd handoff note]" in text and "keep the parser API" in text
    assert FOCUS_SECRET not in text and "[REDACTED:" in text
    assert res.cache.compact_requests.pending(pk) is None  # served: the request is cleared


def test_compact_request_waits_for_a_pending_tool_call(client) -> None:  # type: ignore[no-untyped-def]
    """While a tool call is in flight the request stays pending and nothing is summarized; after the result it runs."""
    c, auth, sent, res = client
    append(c, auth, [{"role": "user", "content": "task"}])
    for n in range(6):
        append(c, auth, unit(n, "x\n" * 50))
    append(c, auth, unit(99, "y")[:1])  # a call without its result yet
    assert c.post("/v1/sessions/s/compact", headers=auth).status_code == 202
    tenant, pk, version = sent[-1]
    jobs.compact(tenant, pk, version, res)
    snap = load(res.engine, pk).snapshot
    assert snap is None or "handoff note" not in str(snap.prompt)
    request = res.cache.compact_requests.pending(pk)
    assert request is not None and request.focus == ""
    append(c, auth, unit(99, "y")[1:])
    tenant, pk, version = sent[-1]
    assert jobs.compact(tenant, pk, version, res) == "published"
    assert "[compactd handoff note]" in str(c.get("/v1/sessions/s/prompt", headers=auth).json()["messages"])


def compact_request(c: TestClient, auth: dict[str, str]) -> dict:
    return c.get("/v1/sessions/s", headers=auth).json()["compact_request"]


def test_session_info_reports_a_compact_request_pending_then_done_at_its_epoch(client) -> None:  # type: ignore[no-untyped-def]
    """GET session shows a /compact request pending (and why) until a job serves it, then done at the epoch it published."""
    c, auth, sent, res = client
    append(c, auth, [{"role": "user", "content": "task"}])
    for n in range(6):
        append(c, auth, unit(n, "x\n" * 50))
    append(c, auth, unit(99, "y")[:1])  # a call without its result yet
    assert compact_request(c, auth) is None
    c.post("/v1/sessions/s/compact", headers=auth)
    pending = compact_request(c, auth)
    assert pending["status"] == "pending" and pending["requested_at"] and pending["epoch"] is None
    tenant, pk, version = sent[-1]
    jobs.compact(tenant, pk, version, res)
    waiting = compact_request(c, auth)
    assert waiting["status"] == "pending" and "tool call" in waiting["reason"]
    append(c, auth, unit(99, "y")[1:])
    tenant, pk, version = sent[-1]
    assert jobs.compact(tenant, pk, version, res) == "published"
    epoch = c.get("/v1/sessions/s/prompt", headers=auth).json()["epoch"]
    assert compact_request(c, auth) == {
        "status": "done",
        "epoch": epoch,
        "reason": "a handoff note was switched in",
        "requested_at": pending["requested_at"],
    }


def test_session_info_reports_a_compact_request_skipped_with_nothing_to_summarize(client) -> None:  # type: ignore[no-untyped-def]
    """A /compact on a session with nothing before its newest turns is skipped, and GET session says why."""
    c, auth, sent, res = client
    append(c, auth, [{"role": "user", "content": "Port the parser to Rust."}])
    c.post("/v1/sessions/s/compact", headers=auth)
    tenant, pk, version = sent[-1]
    jobs.compact(tenant, pk, version, res)
    outcome = compact_request(c, auth)
    assert outcome["status"] == "skipped" and outcome["reason"].startswith("nothing to summarize")
    assert res.cache.compact_requests.pending(pk) is None


def test_a_compact_request_on_a_current_session_with_nothing_to_summarize_is_answered(client) -> None:  # type: ignore[no-untyped-def]
    """A /compact after the session's snapshot is current publishes nothing new, and is still answered (skipped)."""
    c, auth, sent, res = client
    append(c, auth, [{"role": "user", "content": "Port the parser to Rust."}])
    tenant, pk, version = sent[-1]
    assert jobs.compact(tenant, pk, version, res) == "published"
    c.post("/v1/sessions/s/compact", headers=auth)
    jobs.compact(tenant, pk, version, res)
    outcome = compact_request(c, auth)
    assert outcome["status"] == "skipped" and outcome["reason"].startswith("nothing to summarize")
    assert res.cache.compact_requests.pending(pk) is None


def test_session_info_reports_cache_reuse_per_session(client) -> None:  # type: ignore[no-untyped-def]
    """Consecutive fetches within an epoch reuse nearly all of the previous prompt, and the session reports it."""
    c, auth, sent, res = client
    append(c, auth, [{"role": "user", "content": "task " * 2000}])
    tenant, pk, version = sent[-1]
    jobs.compact(tenant, pk, version, res)
    for n in range(5):
        c.get("/v1/sessions/s/prompt", headers=auth)
        append(c, auth, unit(n, "ok"))
    c.get("/v1/sessions/s/prompt", headers=auth)
    # the API writes reuse records to Redis in batches, every half second
    reuse = wait_for(
        lambda: (
            (r := c.get("/v1/sessions/s", headers=auth).json()["cache_reuse"])["fetches_compared"] == 5 and r
        ),
        10,
    )
    assert 0.8 < reuse["mean_reused_share"] < 1.0
    assert reuse["share_of_fetches_reusing_90pct"] >= 0.6


def test_compact_request_for_an_unknown_session_is_a_404(client) -> None:  # type: ignore[no-untyped-def]
    """No session, no request: a problem+json 404."""
    c, auth, _, _ = client
    r = c.post("/v1/sessions/nope/compact", json={"focus": "x"}, headers=auth)
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")


def test_a_known_model_name_sets_the_session_window(client) -> None:  # type: ignore[no-untyped-def]
    """Appending with model gpt-4o and no window gives the session gpt-4o's 128k profile; an explicit window wins."""
    c, auth, _, _ = client
    c.post(
        "/v1/sessions/m1/turns",
        json={"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o-2024-08-06"},
        headers=auth,
    )
    c.post(
        "/v1/sessions/m2/turns",
        json={"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o", "context_window": 50_000},
        headers=auth,
    )
    assert c.get("/v1/sessions/m1", headers=auth).json()["profile"]["context_window"] == 128_000
    assert c.get("/v1/sessions/m2", headers=auth).json()["profile"]["context_window"] == 50_000
    assert c.get("/v1/sessions/m1/prompt", headers=auth).json()["budget_tokens"] == 128_000 - 16_384


def test_an_unknown_model_name_says_which_window_was_assumed(client) -> None:  # type: ignore[no-untyped-def]
    """An unknown model and no window: the append answers with the assumed default window and a
    warning, and logs it with the session and tenant; a known model or an explicit window does not."""
    c, auth, _, res = client
    hi = [{"role": "user", "content": "hi"}]
    with structlog.testing.capture_logs() as logs:
        r = c.post("/v1/sessions/u1/turns", json={"messages": hi, "model": "llama-9-huge"}, headers=auth)
    body = r.json()
    assert body["context_window"] == res.settings.context_window and body["window_assumed"] is True
    assert "llama-9-huge" in body["warnings"][0] and f"{res.settings.context_window:,}" in body["warnings"][0]
    [event] = [e for e in logs if e["event"] == "session.window_assumed"]
    assert event["log_level"] == "warning" and event["session_id"] == "u1" and event["tenant_id"]
    assert event["context_window"] == res.settings.context_window
    for sid, extra in (
        ("u2", {"model": "gpt-4o"}),
        ("u3", {"model": "llama-9-huge", "context_window": 50_000}),
    ):
        body = c.post(f"/v1/sessions/{sid}/turns", json={"messages": hi, **extra}, headers=auth).json()
        assert body["window_assumed"] is False and body["warnings"] == []
    assert body["context_window"] == 50_000
    # the session's own window stays when a later append names an unknown model
    body = c.post(
        "/v1/sessions/u3/turns", json={"messages": hi, "model": "llama-9-huge"}, headers=auth
    ).json()
    assert body["context_window"] == 50_000 and body["window_assumed"] is False


def test_memory_changes_go_to_the_next_user_turn_until_the_top_is_rewritten(client) -> None:  # type: ignore[no-untyped-def]
    """A memory change between epochs leaves the served prompt as it was (a fetch adds nothing):
    the next user turn carries it in a memory note, kept from then on, whether served from the
    database or the cache; a rewrite from the top renders it into the pinned block."""
    c, auth, sent, res = client
    append(c, auth, [{"role": "user", "content": "Port the parser to Rust."}])
    for n in range(12):
        append(c, auth, unit(n, f"step {n} output\n" * 30))
    tenant, pk, version = sent[-1]
    assert jobs.compact(tenant, pk, version, res) == "published"
    before = c.get("/v1/sessions/s/prompt", headers=auth).json()

    decision = "Keep the public parse() signature"
    r = c.patch(
        "/v1/sessions/s/memory",
        json={"ops": [{"op": "add", "section": "decisions", "value": decision}]},
        headers=auth,
    )
    assert r.status_code == 200, r.text
    assert c.get("/v1/sessions/s/prompt", headers=auth).json() == before
    append(c, auth, unit(12, "step 12 output\n" * 30))
    for source in ("db", "cache"):  # before the worker republishes, and after
        if source == "cache":
            tenant, pk, version = sent[-1]
            assert jobs.compact(tenant, pk, version, res) == "published"
        during = c.get("/v1/sessions/s/prompt", headers=auth).json()
        assert during["epoch"] == before["epoch"]
        assert during["system"] == before["system"]  # the pinned block: byte-identical
        assert extends(before, during)  # cache_control placement aside
        note = during["messages"][-1]["content"][-1]["text"]
        assert note.startswith("<compactd-memory>") and decision in note, source

    r = c.post("/v1/sessions/s/compact", json={}, headers=auth)
    assert r.status_code == 202
    assert jobs.compact(tenant, pk, version, res) == "published"
    after = c.get("/v1/sessions/s/prompt", headers=auth).json()
    assert after["epoch"] > before["epoch"]
    assert decision in str(after["system"]) and decision not in str(before["system"])


def test_the_memory_budget_setting_bounds_the_pinned_block(tmp_path: Path, redis_url: str) -> None:
    """COMPACTD_MEMORY_BUDGET_TOKENS is what the served prompt's memory block is rendered within
    (the block a rewrite from the top renders: here a user's /compact)."""
    from worker.compaction.tokens import count_text

    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'b.db'}", redis_url, memory_budget_tokens=60)
    with open_app(settings, raise_server_exceptions=True) as api:
        c, auth = api.client, api.auth
        append(c, auth, [{"role": "user", "content": "Port the parser to Rust."}])
        for n in range(12):
            append(c, auth, unit(n, f"step {n} output\n" * 30))
        ops = [
            {"op": "add", "section": "decisions", "value": f"decision {n}: " + "word " * 20} for n in range(8)
        ]
        assert c.patch("/v1/sessions/s/memory", json={"ops": ops}, headers=auth).status_code == 200
        assert c.post("/v1/sessions/s/compact", json={}, headers=auth).status_code == 202
        api.compact("s")
        system = c.get("/v1/sessions/s/prompt", headers=auth).json()["system"]
    block = next(b["text"] for b in system if "<working_memory>" in b["text"])
    inner = block.removeprefix("<working_memory>\n").removesuffix("\n</working_memory>")
    assert 0 < count_text(inner) <= 60
