"""Working memory over HTTP on SQLite and PostgreSQL: PATCH ops, history and diffs, guarded DELETE,
restore, the update_working_memory tool, shared scopes, and the migration from memory_items."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import inspect, text

from tests.factories import assistant, user
from tests.integration.conftest import AppClient
from tests.integration.test_api import MARKER, assert_problem
from worker.store import memory, sessions
from worker.store.db import SCHEMA_VERSION, make_engine, migrate, read_tx, write_tx
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services
TOKEN = "ghp_" + "memtest4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH"[:36]  # fake, detected shape


def patch(api: AppClient, ops: list[dict[str, Any]], sid: str = "s", **params: str) -> Any:
    return api.client.patch(f"/v1/sessions/{sid}/memory", json={"ops": ops}, params=params, headers=api.auth)


TASK = {"op": "set", "section": "task", "value": "Fix the failing test in src/app.py"}
FILE = {"op": "add", "section": "important_files", "value": "src/app.py", "seq": 3}
BLOCKER = {
    "op": "add",
    "section": "blockers",
    "key": "pytest tests/test_app.py",
    "value": "1 failed: KeyError",
}


def test_patch_applies_ops_and_get_shows_sections_rendered_block_and_version(api: AppClient) -> None:
    """PATCH applies set/add/resolve; GET shows each section's items, the rendered block and the
    version; the prompt carries the change in the next user turn's memory note (the prompt before
    it is left as it was served)."""
    api.append("s", user("go"))
    appended = len(api.enqueued)
    r = patch(api, [TASK, FILE, BLOCKER])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["version"] == 1 and body["budget_tokens"] == 800 and body["hard_cap_tokens"] == 1500
    assert [i["value"] for i in body["sections"]["task"]] == [TASK["value"]]
    (f,) = body["sections"]["important_files"]
    assert (f["key"], f["origin"], f["source_seq"], f["status"]) == ("src/app.py", "agent", 3, "open")
    assert body["rendered"].startswith("Task:\n- Fix the failing test") and body["tokens"] > 0
    assert body["items"] == []  # no notes
    assert len(api.enqueued) == appended + 1  # republished
    before = api.get("/v1/sessions/s/prompt").json()["messages"]
    assert "src/app.py" not in str(before)  # a fetch adds nothing of its own
    api.append("s", assistant("Looking."), user("go on"))
    after = api.get("/v1/sessions/s/prompt").json()["messages"]
    assert after[: len(before)] == before
    note = after[-1]["content"][-1]["text"]
    assert note.startswith("<compactd-memory>\nWorking memory changed since it was last shown:")
    assert "+ Important files: src/app.py" in note and "Fix the failing test" in note
    appended = len(api.enqueued) - 1  # the append's job
    resolved = patch(
        api, [{"op": "resolve", "section": "blockers", "key": "pytest tests/test_app.py"}]
    ).json()
    assert resolved["version"] == 2 and resolved["sections"]["blockers"][0]["status"] == "resolved"
    assert "Blockers" not in resolved["rendered"]
    again = patch(api, [TASK]).json()
    assert again["version"] == 2 and len(api.enqueued) == appended + 2  # the same value again changes nothing


@pytest.mark.parametrize(
    ("op", "field"),
    [
        ({"op": "set", "section": "todo", "value": "x"}, "ops[1].section"),
        ({"op": "upsert", "section": "notes", "key": "k", "value": "x"}, "ops[1].op"),
        ({"op": "add", "section": "decisions", "value": "  "}, "ops[1].value"),
        ({"op": "remove", "section": "notes", "key": "missing"}, "ops[1].key"),
        ({"op": "resolve", "section": "task"}, "ops[1].op"),
    ],
)
def test_a_bad_op_is_a_problem_naming_its_field_and_nothing_is_written(
    api: AppClient, op: dict, field: str
) -> None:
    """One op that cannot apply makes the whole PATCH a 422 naming ops[i].<field>; the op before it is not applied."""
    api.append("s", user("go"))
    appended = len(api.enqueued)
    body = assert_problem(patch(api, [TASK, op]), 422)
    assert body["field"] == field and body["errors"][0]["loc"][:3] == ["body", "ops", "1"]
    after = api.get("/v1/sessions/s/memory").json()
    assert after["version"] == 0 and after["sections"]["task"] == [] and len(api.enqueued) == appended


def test_schema_errors_and_the_hard_cap_are_problems_and_write_nothing(api: AppClient) -> None:
    """Empty ops, an unknown origin, an unknown field and a value past the hard cap are 422 problems; memory stays empty."""
    api.append("s", user("go"))
    h = api.auth
    assert_problem(api.client.patch("/v1/sessions/s/memory", json={"ops": []}, headers=h), 422)
    bad_origin = {"ops": [TASK], "origin": "observed"}
    assert assert_problem(api.client.patch("/v1/sessions/s/memory", json=bad_origin, headers=h), 422)[
        "errors"
    ][0]["loc"] == ["body", "origin"]
    extra = {"ops": [{**TASK, "colour": MARKER}]}
    assert_problem(api.client.patch("/v1/sessions/s/memory", json=extra, headers=h), 422)
    huge = assert_problem(patch(api, [{"op": "set", "section": "next", "value": f"{MARKER} " * 1_000}]), 422)
    assert huge["hard_cap_tokens"] == 1500
    assert api.get("/v1/sessions/s/memory").json()["version"] == 0
    assert api.get("/v1/sessions/s/memory/history").json()["versions"] == []


def test_numbers_past_the_databases_integers_are_problems_and_write_nothing(api: AppClient) -> None:
    """A source seq, a restore event or a history version past 2**63 - 1 is a 422 naming the
    field (it was a 500: the database could not take it); memory stays as it was."""
    api.append("s", user("go"))
    big = 2**63
    seq = assert_problem(patch(api, [{**FILE, "seq": big}]), 422)
    assert seq["errors"][0]["loc"] == ["body", "ops", "0", "seq"]
    restore = {"event": big}
    event = assert_problem(
        api.client.post("/v1/sessions/s/memory/restore", json=restore, headers=api.auth), 422
    )
    assert event["errors"][0]["loc"] == ["body", "event"]
    diff = assert_problem(api.get(f"/v1/sessions/s/memory/history?from=0&to={big}"), 422)
    assert diff["errors"][0]["loc"] == ["query", "to"]
    assert api.get("/v1/sessions/s/memory").json()["version"] == 0


def test_history_lists_versions_and_diffs_any_two(api: AppClient) -> None:
    """History groups events by version; ?from=&to= gives the added, removed and changed items."""
    api.append("s", user("go"))
    patch(api, [TASK, FILE])  # v1
    patch(api, [{"op": "set", "section": "task", "value": "Fix it and add a test"}, BLOCKER])  # v2
    patch(api, [{"op": "remove", "section": "important_files", "key": "src/app.py"}])  # v3
    h = api.get("/v1/sessions/s/memory/history").json()
    assert h["version"] == 3 and [v["version"] for v in h["versions"]] == [1, 2, 3]
    changed_task = h["versions"][1]["events"][0]
    assert (changed_task["before"], changed_task["after"]) == (TASK["value"], "Fix it and add a test")
    d = api.get("/v1/sessions/s/memory/history?from=1&to=3").json()
    assert [i["key"] for i in d["added"]] == ["pytest tests/test_app.py"]
    assert [i["key"] for i in d["removed"]] == ["src/app.py"]
    assert [(c["before"]["value"], c["after"]["value"]) for c in d["changed"]] == [
        (TASK["value"], "Fix it and add a test")
    ]
    assert api.get("/v1/sessions/s/memory/history?from=0&to=1").json()["removed"] == []
    assert assert_problem(api.get("/v1/sessions/s/memory/history?from=1"), 422)["field"] == "to"


def test_delete_needs_a_key_or_all_and_is_recorded_and_restorable(api: AppClient) -> None:
    """DELETE without ?key= is refused unless ?all=true; deletions are events any of which restore brings back."""
    api.append("s", user("go"))
    patch(api, [TASK, FILE, {"op": "set", "section": "notes", "key": "goal", "value": "ship"}])
    refused = assert_problem(api.client.delete("/v1/sessions/s/memory", headers=api.auth), 422)
    assert refused["field"] == "all" and "all=true" in refused["detail"]
    assert api.get("/v1/sessions/s/memory").json()["version"] == 1
    gone = api.client.delete("/v1/sessions/s/memory?all=true", headers=api.auth).json()
    assert all(v == [] for v in gone["sections"].values()) and gone["version"] == 2
    (deleted,) = [v for v in api.get("/v1/sessions/s/memory/history").json()["versions"] if v["version"] == 2]
    assert {e["reason"] for e in deleted["events"]} == {"deleted by client"} and len(deleted["events"]) == 3
    task_event = next(e for e in deleted["events"] if e["section"] == "task")
    r = api.client.post("/v1/sessions/s/memory/restore", json={"event": task_event["id"]}, headers=api.auth)
    assert r.status_code == 200 and r.json()["sections"]["task"][0]["value"] == TASK["value"]
    added = api.get("/v1/sessions/s/memory/history").json()["versions"][0]["events"][0]
    no_before = assert_problem(
        api.client.post("/v1/sessions/s/memory/restore", json={"event": added["id"]}, headers=api.auth), 422
    )
    assert no_before["field"] == "event"
    assert_problem(
        api.client.post("/v1/sessions/s/memory/restore", json={"event": 999_999}, headers=api.auth), 404
    )


def test_memory_routes_are_tenant_isolated(api: AppClient) -> None:
    """Another tenant gets 404 from PATCH, history and restore, and writes nothing."""
    api.append("s", user("go"))
    patch(api, [TASK])
    other = {"Authorization": f"Bearer {api.other_key}"}
    assert_problem(api.client.patch("/v1/sessions/s/memory", json={"ops": [FILE]}, headers=other), 404)
    assert_problem(api.client.get("/v1/sessions/s/memory/history", headers=other), 404)
    assert_problem(api.client.post("/v1/sessions/s/memory/restore", json={"event": 1}, headers=other), 404)
    assert_problem(api.client.delete("/v1/sessions/s/memory?all=true", headers=other), 404)
    assert api.get("/v1/sessions/s/memory").json()["version"] == 1


def test_keys_and_values_are_redacted_like_put(api: AppClient) -> None:
    """A secret in a PATCH key or value is stored as its placeholder, never verbatim."""
    api.append("s", user("go"))
    body = patch(
        api, [{"op": "set", "section": "notes", "key": f"token {TOKEN}", "value": f"use {TOKEN}"}]
    ).json()
    assert TOKEN not in str(body) and "[REDACTED:" in body["items"][0]["key"]
    assert TOKEN not in api.get("/v1/sessions/s/memory/history").text


def test_the_tool_input_is_a_patch_body(api: AppClient) -> None:
    """GET /v1/tools has update_working_memory; an input matching its schema, forwarded as is, applies."""
    api.append("s", user("go"))
    tools = {t["name"]: t for t in api.client.get("/v1/tools", headers=api.auth).json()}
    tool = tools["update_working_memory"]
    item_schema = tool["input_schema"]["properties"]["ops"]["items"]
    assert set(item_schema["properties"]["section"]["enum"]) >= {"task", "blockers", "notes"}
    tool_input = {"ops": [TASK, {"op": "add", "section": "decisions", "value": "Use pytest fixtures"}]}
    r = api.client.patch("/v1/sessions/s/memory", json=tool_input, headers=api.auth)
    assert r.status_code == 200 and r.json()["sections"]["decisions"][0]["origin"] == "agent"


def test_the_tenant_scope_is_shared_with_provenance(api: AppClient) -> None:
    """An item written to ?scope=tenant from one session renders in another's memory; history names the writer."""
    api.append("a", user("go"))
    api.append("b", user("go"))
    note = {"op": "set", "section": "notes", "key": "style", "value": "tabs, not spaces"}
    shared = patch(api, [note], sid="a", scope="tenant").json()
    assert shared["scope"] == "tenant" and shared["version"] == 1
    b = api.get("/v1/sessions/b/memory").json()
    assert "- style: tabs, not spaces" in b["rendered"] and b["items"] == []  # rendered, not b's own
    # b's prompt shows it when b's block is next rendered (a rewrite from the top): a shared
    # scope's change is not one of b's own, which its memory notes carry (docs/memory.md)
    (event,) = api.get("/v1/sessions/b/memory/history?scope=tenant").json()["versions"][0]["events"]
    assert event["written_by"] == "a"
    assert assert_problem(api.get("/v1/sessions/b/memory?scope=global"), 422)["field"] == "scope"


def test_migration_moves_memory_items_into_notes(database_url: str) -> None:
    """A database at schema 3 with memory_items rows: migrating (twice at once) makes them user notes with history, and drops the table."""
    engine = make_engine(database_url)
    migrate(engine)
    tenant = create_tenant(engine, "old")[0]
    pk = sessions.append_turns(engine, tenant, "s", [sessions_turn()]).session_pk
    with write_tx(engine) as conn:
        conn.execute(text(memory_items_ddl()))
        conn.execute(
            text(
                'INSERT INTO memory_items (id, session_id, "key", value, pinned, tokens, updated_at) VALUES '
                "(1, :pk, 'goal', 'ship it', true, 5, '2026-01-02 03:04:05'), "
                "(2, :pk, 'style', 'tabs', false, 4, '2026-01-02 03:04:05')"
            ),
            {"pk": pk},
        )
        conn.execute(text("UPDATE sessions SET memory_version = 2"))
        conn.execute(text("UPDATE schema_version SET version = 3"))
    engine.dispose()
    engines = [make_engine(database_url) for _ in range(2)]
    threads = [threading.Thread(target=migrate, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine = engines[0]
    items = {i.key: i for i in memory.load(engine, pk)}
    assert {(k, i.section, i.value, i.origin, i.pinned) for k, i in items.items()} == {
        ("goal", "notes", "ship it", "user", True),
        ("style", "notes", "tabs", "user", False),
    }
    assert {i.key for i in memory.fold_events(memory.history(engine, pk), 2)} == {"goal", "style"}
    assert "memory_items" not in inspect(engine).get_table_names()
    with read_tx(engine) as conn:
        assert conn.execute(text("SELECT version FROM schema_version")).scalar_one() == SCHEMA_VERSION
    for e in engines:
        e.dispose()


def sessions_turn() -> Any:
    from worker.compaction.model import Turn

    return Turn(0, "user", ({"type": "text", "text": "go"},), 1)


def memory_items_ddl() -> str:
    return (
        "CREATE TABLE memory_items (id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL REFERENCES sessions(id),"
        ' "key" VARCHAR NOT NULL, value TEXT NOT NULL, pinned BOOLEAN NOT NULL, tokens INTEGER NOT NULL,'
        ' updated_at TIMESTAMP NOT NULL, UNIQUE (session_id, "key"))'
    )


def test_shared_and_own_memory_writes_from_two_sessions_do_not_deadlock(pg_url: str) -> None:
    """A tenant-scope write bumps every session of the tenant; one session writing the tenant
    scope while another writes a key scope and its own memory must all go through (PostgreSQL)."""
    import threading

    from worker.memory.model import Change
    from worker.store import memory, sessions
    from worker.store.db import make_engine, migrate
    from worker.store.tenants import create_tenant

    engine = make_engine(pg_url)
    migrate(engine)
    tenant = create_tenant(engine, "t")[0]
    pks = [sessions.append_turns(engine, tenant, f"s{i}", [sessions_turn()]).session_pk for i in range(2)]
    errors: list[str] = []

    def run(i: int) -> None:
        for n in range(25):
            try:
                scope = "tenant" if i == 0 else "key:repo"
                memory.change(
                    engine,
                    pks[i],
                    [Change("set", "notes", f"v{n}", key=f"k{i}")],
                    origin="agent",
                    scope=scope,
                )
                memory.change(engine, pks[i], [Change("set", "notes", f"w{n}", key=f"k{i}")], origin="agent")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.dispose()
    assert errors == []


def test_delete_with_an_unknown_section_is_refused_and_a_decision_is_named_by_its_text(
    api: AppClient,
) -> None:
    """?section= must be a section; a decision is deleted by the text the block shows."""
    api.append("s", user("go"))
    patch(api, [{"op": "add", "section": "decisions", "value": "Keep the public API"}])
    refused = assert_problem(
        api.client.delete("/v1/sessions/s/memory?section=todo&key=x", headers=api.auth), 422
    )
    assert refused["field"] == "section"
    r = api.client.delete(
        "/v1/sessions/s/memory",
        params={"section": "decisions", "key": "Keep the public API"},
        headers=api.auth,
    )
    assert r.status_code == 200 and r.json()["sections"]["decisions"] == []
