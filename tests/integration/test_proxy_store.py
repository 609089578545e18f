"""The proxy's reconcile against each store (SQLite, PostgreSQL): racing requests never store a message twice."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import flush_prefix, make_settings
from worker.contracts import AppendRequest
from worker.flows.append import BrokenConversation, append_messages, note_version
from worker.flows.proxy import (
    Proxied,
    Reconciled,
    RecordMemo,
    StaleAhead,
    commit_ahead,
    reconcile,
    reconcile_ahead,
    record_reply,
    settle,
)
from worker.flows.serve import fetch_ready, session_pk
from worker.proxy.conversations import Conversation
from worker.proxy.fingerprints import chains
from worker.proxy.reconcile import Record
from worker.resources import Resources
from worker.store.db import read_tx
from worker.store.proxy import load_records
from worker.store.sessions import get_session, load_turns
from worker.store.tenants import create_tenant

KEY = b"p" * 32


@pytest.fixture
def res(tmp_path: Path, database_url: str, redis_url: str) -> Iterator[Resources]:
    settings = make_settings(tmp_path, database_url, redis_url)
    r = Resources.build(settings)
    yield r
    flush_prefix(redis_url, settings.redis_prefix)
    r.close()


def _req(res: Resources, tenant: int, key: str, messages: list[dict[str, Any]]) -> Proxied:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": messages}
    return Proxied(res, tenant, Conversation(key, "header"), body, [], None, lambda *a: None)


def _run(res: Resources, req: Proxied) -> Reconciled:
    return reconcile(req, chains(KEY, req.body["messages"]))


def _u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def test_racing_continuations_store_each_message_once(res: Resources) -> None:
    """Eight requests at once on one conversation, half one continuation and half another: one
    continuation extends the session exactly once, the other continues in one linked session."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key = f"k-{uuid.uuid4().hex[:8]}"
    start = [_u("task"), _a("ok"), _u("next")]
    assert _run(res, _req(res, tenant, key, start)).plan.kind == "new"
    left, right = [*start, _a("left"), _u("go left")], [*start, _a("right"), _u("go right")]
    outcomes: list[Reconciled] = []
    errors: list[BaseException] = []

    def go(messages: list[dict[str, Any]]) -> None:
        try:
            outcomes.append(_run(res, _req(res, tenant, key, messages)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(left if i % 2 else right,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    sessions = {o.plan.session_id for o in outcomes}
    assert len(sessions) == 2
    versions = {sid: get_session(res.engine, tenant, sid).version for sid in sessions}
    assert sorted(versions.values()) == [5, 5]  # each history stored once, in its own session
    records = load_records(res.engine, tenant, key)  # the most recently moved first
    assert records and records[0].messages == 5


def test_a_reply_loses_to_a_request_that_came_first(res: Resources) -> None:
    """When the client's next request is reconciled before the reply was recorded, the reply is not
    appended on top of it: the session holds the client's copy once."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key = f"k-{uuid.uuid4().hex[:8]}"
    first = _req(res, tenant, key, [_u("task")])
    served = _run(res, first)
    # the client already has the answer and asks again before compactd records it
    _run(res, _req(res, tenant, key, [_u("task"), _a("answer"), _u("thanks")]))
    assert not record_reply(first, served.plan, [_a("answer")], _a("answer"))
    assert get_session(res.engine, tenant, key).version == 3


def test_two_processes_memories_never_store_a_message_twice(res: Resources) -> None:
    """Two API processes (a RecordMemo each) serving one conversation by turns: a remembered plan
    gone stale (the other process moved the record) is caught by the claim and planned again from
    the database; the session holds each message once, and that conversation is then planned from
    the database in the process whose memory went stale."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key = f"k-{uuid.uuid4().hex[:8]}"
    memos = (RecordMemo(), RecordMemo())
    history = [_u("task")]
    for step in range(6):
        body = {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": list(history)}
        req = Proxied(
            res, tenant, Conversation(key, "header"), body, [], None, lambda *a: None, memos[step % 2]
        )
        done = _run(res, req)
        assert done.plan.session_id == key and done.plan.kind in ("new", "extend")
        history += [_a(f"answer {step}"), _u(f"next {step}")]
    assert get_session(res.engine, tenant, key).version == len(history) - 2
    assert memos[0].get((tenant, key)) is None  # went stale once (step 2): read from now on
    # one process alone, its reply recorded: the next request plans from memory and extends
    alone = RecordMemo()
    body = {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": [_u("solo")]}
    solo = f"k-{uuid.uuid4().hex[:8]}"
    first = Proxied(res, tenant, Conversation(solo, "header"), body, [], None, lambda *a: None, alone)
    served = _run(res, first)
    assert record_reply(first, served.plan, [_a("hi")], _a("hi"))
    assert alone.get((tenant, solo)) == (Record(solo, 2, chains(KEY, [_u("solo"), _a("hi")])[2]),)
    body2 = {**body, "messages": [_u("solo"), _a("hi"), _u("more")]}
    again = _run(
        res, Proxied(res, tenant, Conversation(solo, "header"), body2, [], None, lambda *a: None, alone)
    )
    assert again.plan.kind == "extend" and get_session(res.engine, tenant, solo).version == 3


def _published(res: Resources, jobs: list[tuple[int, int, int]]) -> None:
    """Run the compaction jobs the appends asked for (the worker's part: the cached prompt)."""
    from worker.flows.compact import run_job

    for tenant, pk, _ in jobs:
        run_job(tenant, pk, res, None)
    jobs.clear()


def _remembering(
    res: Resources, tenant: int, key: str, memo: RecordMemo, jobs: list[Any], messages: list[dict[str, Any]]
) -> Proxied:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": messages}
    return Proxied(res, tenant, Conversation(key, "header"), body, [], None, lambda *j: jobs.append(j), memo)


@dataclass
class _Ahead:
    tenant: int
    key: str
    memo: RecordMemo
    links: list[str]
    ahead: Any


def _served_ahead(res: Resources) -> _Ahead:
    """A conversation stored and its prompt published, then its next request rendered ahead."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, memo, jobs = f"k-{uuid.uuid4().hex[:8]}", RecordMemo(), []
    start = [_u("task"), _a("ok"), _u("next")]
    _run(res, _remembering(res, tenant, key, memo, jobs, start))
    _published(res, jobs)
    history = [*start, _a("done"), _u("and now?")]
    links = chains(KEY, history)
    ahead = reconcile_ahead(_remembering(res, tenant, key, memo, jobs, history), links)
    assert ahead is not None
    return _Ahead(tenant, key, memo, links, ahead)


def _append_elsewhere(res: Resources, tenant: int, key: str, message: dict[str, Any]) -> None:
    """Another writer's append to the session (POST /turns), not through this process's memo."""
    append_messages(
        res,
        tenant,
        key,
        AppendRequest(messages=[message]),
        idempotency_key=None,
        activity=None,
        enqueue=lambda *j: None,
    )


@pytest.mark.parametrize("new_text", ["and now?", "log line " * 6000], ids=["short", "offloaded"])
def test_a_request_served_ahead_stores_what_its_prompt_holds(res: Resources, new_text: str) -> None:
    """A request that extends the remembered branch is rendered before its commit (a block too big
    to keep inline offloaded to a file in the same transaction): after the commit the session holds
    its messages once and the fetch serves exactly the prompt it was sent with."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, memo, jobs = f"k-{uuid.uuid4().hex[:8]}", RecordMemo(), []
    start = [_u("task"), _a("ok"), _u("next")]
    first = _run(res, _remembering(res, tenant, key, memo, jobs, start))
    _published(res, jobs)
    history = [*start, _a("done"), _u(new_text)]
    req = _remembering(res, tenant, key, memo, jobs, history)
    ahead = reconcile_ahead(req, chains(KEY, history))
    assert ahead is not None and get_session(res.engine, tenant, key).version == 3  # nothing stored yet
    assert bool(ahead.prepared.read.ingested.files) == (new_text != "and now?")
    done = commit_ahead(ahead)
    assert (done.plan.kind, done.appended) == ("extend", 2)
    assert get_session(res.engine, tenant, key).version == 5
    # its version is the caller's to note (beside the upstream call): not noted yet, then noted
    assert done.unnoted is not None and done.unnoted.version == 5
    assert res.cache.prompts.noted_version(done.unnoted.session_pk)[0] == 3  # type: ignore[index]
    note_version(res, done.unnoted)
    assert res.cache.prompts.noted_version(done.unnoted.session_pk)[0] == 5  # type: ignore[index]
    served = fetch_ready(res.engine, res.cache, tenant, first.plan.session_id, res.policy_for)
    assert served is not None and served.body == ahead.served.body
    assert load_records(res.engine, tenant, key)[0].messages == 5


def test_a_prefetched_entry_is_taken_for_its_own_session_only(res: Resources) -> None:
    """The entry read with the key check stands for the session it was read for (none there: the
    ordinary path); for another session the entry is read as usual."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, memo, jobs = f"k-{uuid.uuid4().hex[:8]}", RecordMemo(), []
    start = [_u("task"), _a("ok"), _u("next")]
    first = _run(res, _remembering(res, tenant, key, memo, jobs, start))
    _published(res, jobs)
    history = [*start, _a("done"), _u("and now?")]
    req = _remembering(res, tenant, key, memo, jobs, history)
    pk = session_pk(res.engine, tenant, first.plan.session_id, res.cache)
    assert pk is not None
    cached = res.cache.prompts.get(pk)
    assert cached is not None
    for prefetched, served in [
        ((first.plan.session_id, pk, None), False),  # read with the key check: none cached
        ((first.plan.session_id, pk, cached), True),
        (("another-session", pk, None), True),  # not this one's: read here
    ]:
        ahead = reconcile_ahead(replace(req, prefetched=prefetched), chains(KEY, history))
        assert (ahead is not None) == served


def test_a_commit_ahead_that_lost_its_session_writes_nothing(res: Resources) -> None:
    """When another append reaches the session between the render and the commit, the commit
    raises and stores nothing (the request is then reconciled the ordinary way)."""
    a = _served_ahead(res)
    _append_elsewhere(res, a.tenant, a.key, _a("from elsewhere"))
    with pytest.raises(StaleAhead):
        commit_ahead(a.ahead)
    assert get_session(res.engine, a.tenant, a.key).version == 4  # the other append only
    assert load_records(res.engine, a.tenant, a.key)[0].messages == 3


def test_a_request_whose_commit_is_lost_after_it_went_upstream_is_stored_once(res: Resources) -> None:
    """The prompt served ahead goes upstream before its commit; when another append reaches the
    session in between, settle stores the request's history the ordinary way instead: every message
    once, after the other append, and the record past the request's history."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, memo, jobs = f"k-{uuid.uuid4().hex[:8]}", RecordMemo(), []
    start = [_u("task"), _a("ok"), _u("next")]
    first = _remembering(res, tenant, key, memo, jobs, start)
    served_from = _run(res, first).plan
    _published(res, jobs)
    history = [*start, _a("done"), _u("and now?")]
    links = chains(KEY, history)
    ahead = reconcile_ahead(_remembering(res, tenant, key, memo, jobs, history), links)
    assert ahead is not None
    # the reply, recorded by this process after its grace, lands between the render and the commit
    assert record_reply(first, served_from, [_a("done")], _a("done"))
    done, stopped = settle(ahead, links)
    assert isinstance(stopped, StaleAhead)
    assert (done.plan.kind, done.appended) == ("extend", 1)  # the user message alone: the reply is in
    stored = get_session(res.engine, tenant, key)
    assert stored.version == 5
    assert load_records(res.engine, tenant, key)[0].messages == 5
    with read_tx(res.engine) as conn:
        texts = [t.content[0]["text"] for t in load_turns(conn, stored.id)]
    assert texts == ["task", "ok", "next", "done", "and now?"]


def test_a_session_written_elsewhere_is_not_served_ahead(res: Resources) -> None:
    """Another process (a RecordMemo of its own) stores the request's new messages first: this
    process's memo no longer knows the session's version, so the request is not rendered ahead
    (its prompt would hold those messages twice) but reconciled the ordinary way: stored once."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, jobs = f"k-{uuid.uuid4().hex[:8]}", []
    here, there = RecordMemo(), RecordMemo()
    start = [_u("task"), _a("ok"), _u("next")]
    _run(res, _remembering(res, tenant, key, here, jobs, start))
    _published(res, jobs)
    history = [*start, _a("done"), _u("and now?")]
    assert _run(res, _remembering(res, tenant, key, there, jobs, history)).plan.kind == "extend"
    _published(res, jobs)  # the cached prompt holds the new messages
    req = _remembering(res, tenant, key, here, jobs, history)
    assert here.written((tenant, key))[1].version == 3  # type: ignore[index]
    assert reconcile_ahead(req, chains(KEY, history)) is None
    assert _run(res, req).plan.kind == "same"
    served = fetch_ready(res.engine, res.cache, tenant, key, res.policy_for)
    assert served is not None and served.body.count(b"and now?") == 1
    assert get_session(res.engine, tenant, key).version == 5


class _ReplyLandsAfterTheRead(RecordMemo):
    """A memo whose first read for a render is followed at once by the previous reply's recording
    (its grace over, in another thread), before the render reads the session."""

    def __init__(self, record: Any) -> None:
        super().__init__()
        self.record = record

    def written(self, conversation: Any) -> Any:
        known = super().written(conversation)
        record, self.record = self.record, None
        if record is not None:
            record()
        return known


def test_a_reply_recorded_between_the_memo_read_and_the_render_is_not_sent_twice(res: Resources) -> None:
    """The reply recorded right after the request read the memo (records and version together):
    the session is then past the version read, so the request is not rendered ahead (its prompt
    would hold the reply from the session and again from its own new messages)."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, jobs = f"k-{uuid.uuid4().hex[:8]}", []
    start = [_u("task"), _a("ok"), _u("next")]
    memo = _ReplyLandsAfterTheRead(None)
    first = _remembering(res, tenant, key, memo, jobs, start)
    served_from = _run(res, first).plan
    _published(res, jobs)
    memo.record = lambda: record_reply(first, served_from, [_a("done-XYZ")], _a("done-XYZ"))
    history = [*start, _a("done-XYZ"), _u("and now?")]
    ahead = reconcile_ahead(_remembering(res, tenant, key, memo, jobs, history), chains(KEY, history))
    assert memo.record is None  # the reply was recorded in between
    assert ahead is None or ahead.served.body.count(b"done-XYZ") == 1


def test_a_history_that_breaks_the_tool_pairing_is_not_sent_ahead(res: Resources) -> None:
    """New messages that would break the stored history's tool pairing are refused before any call
    (the ordinary path answers 400), not sent upstream and refused at the commit."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, memo, jobs = f"k-{uuid.uuid4().hex[:8]}", RecordMemo(), []
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}],
    }
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    start = [_u("task"), call, result]
    _run(res, _remembering(res, tenant, key, memo, jobs, start))
    _published(res, jobs)
    stray = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "?"}]}
    history = [*start, _a("done"), stray]
    req = _remembering(res, tenant, key, memo, jobs, history)
    assert reconcile_ahead(req, chains(KEY, history)) is None
    with pytest.raises(BrokenConversation):
        _run(res, req)
    assert get_session(res.engine, tenant, key).version == 3


def test_a_request_settle_cannot_store_leaves_the_conversation_to_the_database(res: Resources) -> None:
    """Sent ahead, then neither its commit (another append reached the session) nor the ordinary
    reconcile (that append left a tool call its messages do not answer) can store it: settle raises,
    nothing of it is stored, and the conversation's next request is stored before it is sent."""
    a = _served_ahead(res)
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_x", "name": "bash", "input": {}}],
    }
    _append_elsewhere(res, a.tenant, a.key, call)
    with pytest.raises(BrokenConversation):
        settle(a.ahead, a.links)
    assert get_session(res.engine, a.tenant, a.key).version == 4  # the other append only
    # what this process last wrote is forgotten (the records stay): the next request is stored first
    assert a.memo.written((a.tenant, a.key)) is None and a.memo.get((a.tenant, a.key)) is not None


def test_a_blank_text_block_before_a_tool_call_does_not_keep_a_request_from_going_ahead(
    res: Resources,
) -> None:
    """The API's own answers can hold a whitespace-only text block before a tool call; the session
    stores the answer without it (normalized), and the pairing check before the call reads the
    client's copy the same way: the next request is served ahead."""
    tenant = create_tenant(res.engine, f"t-{uuid.uuid4().hex[:6]}")[0]
    key, memo, jobs = f"k-{uuid.uuid4().hex[:8]}", RecordMemo(), []
    call = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "\n\n"},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}},
        ],
    }
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    start = [_u("task"), call, result]
    _run(res, _remembering(res, tenant, key, memo, jobs, start))
    _published(res, jobs)
    history = [*start, _a("done"), _u("and now?")]
    assert (
        reconcile_ahead(_remembering(res, tenant, key, memo, jobs, history), chains(KEY, history)) is not None
    )
