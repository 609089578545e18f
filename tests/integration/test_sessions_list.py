"""GET /v1/sessions (paging, tenant isolation) and GET /v1/sessions/{sid}/stats over real
SQLite/PostgreSQL and Redis, with compaction jobs run for real between appends."""

from __future__ import annotations

import pytest

from tests.factories import long_session, tool_unit, user
from tests.integration.conftest import AppClient
from worker.compaction.tokens import count_text
from worker.store.snapshots import KEEP_SNAPSHOTS

pytestmark = pytest.mark.services


def test_the_list_pages_through_the_tenants_sessions_most_recent_first(api: AppClient) -> None:
    """Seven sessions in pages of three come back newest activity first, each once; another
    tenant's session never appears, and a touched session moves to the front."""
    for i in range(7):
        api.appended(f"s{i}", user(f"task {i}"))
    api.appended("theirs", user("not yours"), key=api.other_key)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        r = api.get("/v1/sessions?limit=3" + (f"&cursor={cursor}" if cursor else ""))
        assert r.status_code == 200, r.text
        page = r.json()
        pages += 1
        seen += [s["id"] for s in page["sessions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [f"s{i}" for i in reversed(range(7))]
    first = api.get("/v1/sessions?limit=1").json()["sessions"][0]
    fetched = api.get("/v1/sessions/s6/prompt").json()
    # the served prompt is what a fetch returns: with no system prompt, and no memory block before
    # the first summary (docs/memory.md), that is the turn itself
    assert first["turns"] == 1 and first["epoch"] == 0 and first["served_tokens"] == fetched["token_count"]
    assert first["served_tokens"] == first["raw_tokens"] > 0
    assert first["last_activity"].endswith("Z")
    api.appended("s2", {"role": "assistant", "content": "ok"}, user("again"))
    assert api.get("/v1/sessions?limit=1").json()["sessions"][0]["id"] == "s2"
    assert [s["id"] for s in api.get("/v1/sessions", key=api.other_key).json()["sessions"]] == ["theirs"]


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=100000",
        "cursor=abc",
        "cursor=1.2.3",
        "limit=x",
        "cursor=1.607979420579272007",
        "cursor=999999999999999999.1",
    ],
)
def test_bad_paging_is_a_problem(api: AppClient, query: str) -> None:
    """A malformed limit or cursor is a 422 problem+json naming the parameter, not a stack trace."""
    r = api.get(f"/v1/sessions?{query}")
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert query.split("=")[0] in r.text and "Traceback" not in r.text


def test_list_and_stats_need_a_key_and_stats_are_per_tenant(api: AppClient) -> None:
    """No key is a 401; another tenant's session stats are a 404."""
    api.appended("mine", user("hello"))
    assert api.client.get("/v1/sessions").status_code == 401
    assert api.client.get("/v1/sessions/mine/stats").status_code == 401
    r = api.get("/v1/sessions/mine/stats", key=api.other_key)
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"


def test_stats_follow_a_real_session_through_several_epochs(api: AppClient) -> None:
    """A real transcript appended in chunks, compacted after each, gives one point per turn, the
    epochs at the turns where they began (even those whose snapshots were pruned), a served size
    matching the fetched prompt, redactions by kind and the virtual files with their reads."""
    messages = long_session()
    first = messages[0]["content"]
    blocks = [{"type": "text", "text": first}] if isinstance(first, str) else list(first)
    planted = {
        "role": "user",
        "content": [*blocks, {"type": "text", "text": "deploy with AKIAIOSFODNN7EXAMPLF"}],
    }
    api.appended("real", planted, context_window=12_000)
    chunks = [messages[i : i + 25] for i in range(1, len(messages), 25)]
    for chunk in chunks:
        api.appended("real", *chunk)
        api.compact("real")
    stats = api.get("/v1/sessions/real/stats").json()
    info = api.get("/v1/sessions/real").json()
    assert stats["turns"] == info["version"] == len(stats["per_turn"])
    assert [p["seq"] for p in stats["per_turn"]] == list(range(1, info["version"] + 1))
    assert len(stats["epochs"]) > KEEP_SNAPSHOTS  # the log outlives the pruned snapshots
    assert [e["epoch"] for e in stats["epochs"]] == sorted({e["epoch"] for e in stats["epochs"]})
    assert {e["kind"] for e in stats["epochs"]} <= {"structural", "summary"}
    assert stats["epoch"] == info["epoch"]
    assert stats["raw_tokens"] == info["tokens"] + stats["offloaded_tokens"]  # offloaded blocks whole
    # one figure for the served prompt: what a fetch's token_count says
    assert stats["served_tokens"] == api.get("/v1/sessions/real/prompt").json()["token_count"]
    assert stats["served_tokens"] <= stats["budget_tokens"] < stats["raw_tokens"]
    assert stats["compaction_ratio"] > 1
    for mark in stats["epochs"]:
        point = stats["per_turn"][mark["at_turn"] - 1]
        assert point["epoch"] >= mark["epoch"]
    assert stats["redactions"].get("aws_access_key", 0) >= 1
    assert "AKIAIOSFODNN7EXAMPLF" not in str(stats)
    listed = api.get("/v1/sessions/real/files").json()["files"]
    assert [f["ref"] for f in stats["files"]] == [f["ref"] for f in listed]
    if listed:
        api.get(f"/v1/sessions/real/files/{listed[0]['ref']}?start_line=1&end_line=2")
        again = api.get("/v1/sessions/real/stats").json()
        assert again["files"][0]["reads"] == ["lines 1-2"] and again["files_read"] >= 1
    summary = api.get("/v1/sessions").json()["sessions"][0]
    assert summary["id"] == "real" and summary["served_tokens"] == stats["served_tokens"]
    assert summary["raw_tokens"] == stats["raw_tokens"]
    api.client.delete("/v1/sessions/real", headers={"Authorization": f"Bearer {api.key}"})
    assert api.get("/v1/sessions/real/stats").status_code == 404


def test_offloaded_outputs_count_whole_in_the_uncompacted_history(api: AppClient) -> None:
    """Four ~55 KB tool outputs offloaded at ingest: the uncompacted history (stats, list, chart)
    counts what the agent produced, not the previews, so the savings show; the served figure is
    still the fetch's token_count."""
    outputs = [
        "\n".join(f"{n:05d} line {n} of output {k}: some words here" for n in range(1200)) for k in range(4)
    ]
    messages: list[dict] = [user("run the four commands")]
    for k, text in enumerate(outputs):
        messages += tool_unit(f"toolu_off{k:04d}", {"command": f"cat out{k}.txt"}, text)
    messages.append({"role": "assistant", "content": "done"})
    api.appended("offloads", *messages)
    api.compact("offloads")
    stats = api.get("/v1/sessions/offloads/stats").json()
    produced = sum(count_text(t) for t in outputs)
    assert len([f for f in stats["files"] if f["kind"] == "offload"]) == 4
    assert stats["offloaded_tokens"] > 0.8 * produced
    assert stats["raw_tokens"] > produced > 3 * stats["served_tokens"]
    assert stats["compaction_ratio"] > 3
    assert stats["served_tokens"] == api.get("/v1/sessions/offloads/prompt").json()["token_count"]
    last = stats["per_turn"][-1]
    assert (
        last["raw_tokens"] == stats["raw_tokens"] > 3 * last["prompt_tokens"]
    )  # the grey area above the line
    listed = next(s for s in api.get("/v1/sessions").json()["sessions"] if s["id"] == "offloads")
    assert listed["raw_tokens"] == stats["raw_tokens"] and listed["served_tokens"] == stats["served_tokens"]
