"""The store contract, run against SQLite and PostgreSQL alike (langgraph-style conformance suite)."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.exc import DBAPIError

from tests.services import PG_URL
from worker.compaction.model import FileWrite, Turn
from worker.memory.model import Change
from worker.store import files, memory, sessions, snapshots
from worker.store.db import SCHEMA_VERSION, make_engine, migrate, read_tx, single_read
from worker.store.tenants import create_tenant, ensure_tenant, reset_key, tenant_for_key

pytestmark = pytest.mark.services


def turn(role: str, text: str) -> Turn:
    return Turn(seq=0, role=role, content=({"type": "text", "text": text},), tokens=3)  # type: ignore[arg-type]


def seqs(engine: Engine, pk: int) -> list[int]:
    with read_tx(engine) as conn:
        return [t.seq for t in sessions.load_turns(conn, pk)]


def test_append_numbers_turns_contiguously_from_one(engine: Engine, tenant: int) -> None:
    """Appends get seqs 1..n in order, and version is the last seq."""
    a = sessions.append_turns(engine, tenant, "s", [turn("user", "a"), turn("assistant", "b")])
    b = sessions.append_turns(engine, tenant, "s", [turn("user", "c")])
    assert (a.first_seq, a.last_seq, b.first_seq, b.version) == (1, 2, 3, 3)
    assert seqs(engine, a.session_pk) == [1, 2, 3]


def test_concurrent_appends_from_threads_stay_contiguous(engine: Engine, tenant: int) -> None:
    """Eight threads appending to one session at once produce seqs 1..n with no gap or duplicate."""
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(5):
                sessions.append_turns(
                    engine, tenant, "busy", [turn("user", f"{i}-{j}"), turn("assistant", "ok")]
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    row = sessions.get_session(engine, tenant, "busy")
    assert seqs(engine, row.id) == list(range(1, 81))
    assert row.version == 80


def test_idempotent_retry_returns_the_original_and_writes_nothing(engine: Engine, tenant: int) -> None:
    """The same key and body replays the first result; the same key with another body is refused."""
    first = sessions.append_turns(
        engine, tenant, "s", [turn("user", "a")], idempotency_key="k1", body_hash="h1"
    )
    again = sessions.append_turns(
        engine, tenant, "s", [turn("user", "a")], idempotency_key="k1", body_hash="h1"
    )
    assert (again.first_seq, again.last_seq, again.replayed) == (first.first_seq, first.last_seq, True)
    with pytest.raises(sessions.IdempotencyMismatch):
        sessions.append_turns(engine, tenant, "s", [turn("user", "b")], idempotency_key="k1", body_hash="h2")
    assert seqs(engine, first.session_pk) == [1]


def test_the_profile_changes_only_on_a_real_append(engine: Engine, tenant: int) -> None:
    """A new system prompt bumps the prompt-head version; the same one again changes nothing, and
    a retry of an older append does not put its older profile back."""

    def append(key: str, system: str, window: int) -> None:
        profile = sessions.Profile(system=system, context_window=window)
        sessions.append_turns(
            engine, tenant, "p", [turn("user", key)], profile=profile, idempotency_key=key, body_hash=key
        )

    def state() -> tuple[str, int, int]:
        row = sessions.get_session(engine, tenant, "p")
        return row.system, row.context_window, row.memory_version

    append("k1", "ALPHA", 100_000)
    assert state() == ("ALPHA", 100_000, 0)
    append("k2", "ALPHA", 100_000)
    assert state() == ("ALPHA", 100_000, 0)
    append("k3", "BETA", 64_000)
    assert state() == ("BETA", 64_000, 1)
    # a late retry of the first append
    append("k1", "ALPHA", 100_000)
    assert state() == ("BETA", 64_000, 1)


def test_a_failing_validator_leaves_no_trace(engine: Engine, tenant: int) -> None:
    """When validation raises, neither the session nor any turn is written."""

    def refuse(window: list, new: list) -> None:
        raise ValueError("no")

    with pytest.raises(ValueError):
        sessions.append_turns(engine, tenant, "new", [turn("user", "a")], validate=refuse)
    assert sessions.get_session(engine, tenant, "new") is None


def test_validation_window_starts_at_the_last_assistant_group(engine: Engine, tenant: int) -> None:
    """The window is a stand-in user message, the last assistant turns and the user turns after them."""
    a = sessions.append_turns(
        engine,
        tenant,
        "s",
        [
            turn("user", "1"),
            turn("assistant", "2"),
            turn("user", "3"),
            turn("assistant", "4"),
            turn("user", "5"),
        ],
    )
    with read_tx(engine) as conn:
        window = sessions.window_messages(conn, a.session_pk, a.version)
    assert window[0] == sessions.EARLIER
    assert [m["content"][0]["text"] for m in window[1:]] == ["4", "5"]


def test_sessions_are_per_tenant(engine: Engine, tenant: int) -> None:
    """Another tenant's session id is a different session."""
    other = create_tenant(engine, f"o-{uuid.uuid4().hex[:6]}")[0]
    sessions.append_turns(engine, tenant, "same", [turn("user", "mine")])
    assert sessions.get_session(engine, other, "same") is None


def test_publish_is_version_guarded(engine: Engine, tenant: int) -> None:
    """A late or stale publish (older epoch, or same epoch with older through) loses."""
    a = sessions.append_turns(
        engine, tenant, "s", [turn("user", "a"), turn("assistant", "b"), turn("user", "c")]
    )
    kw = {
        "tokens": 1,
        "memory_version": 0,
        "state": {"turns": []},
        "prompt": {"system": [], "messages": []},
        "report": {},
    }
    assert snapshots.publish(engine, a.session_pk, epoch=1, through_seq=3, **kw)
    assert not snapshots.publish(engine, a.session_pk, epoch=1, through_seq=2, **kw)
    assert not snapshots.publish(engine, a.session_pk, epoch=0, through_seq=3, **kw)
    assert not snapshots.publish(engine, a.session_pk, epoch=1, through_seq=3, **kw)
    assert snapshots.publish(engine, a.session_pk, epoch=2, through_seq=3, **kw)
    row = sessions.get_session(engine, tenant, "s")
    assert (row.epoch, row.compacted_through) == (2, 3)
    loaded = snapshots.load(engine, a.session_pk)
    assert (loaded.snapshot.epoch, loaded.snapshot.through_seq, loaded.tail) == (2, 3, [])


def test_files_round_trip_through_zstd_and_are_idempotent(engine: Engine, tenant: int) -> None:
    """A file comes back byte for byte, is stored compressed, and saving it twice keeps one row."""
    a = sessions.append_turns(engine, tenant, "s", [turn("user", "a")])
    text_ = "line\n" * 10_000
    f = FileWrite(ref="f_abc.txt", kind="offload", content=text_)
    assert files.save_files(engine, tenant, a.session_pk, [f]) == 1
    assert files.save_files(engine, tenant, a.session_pk, [f]) == 0
    fid, kind, back = files.read_file(engine, a.session_pk, "f_abc.txt")
    assert (kind, back) == ("offload", text_)
    with read_tx(engine) as conn:
        stored = conn.execute(select(files.F.c.data)).scalar_one()
        files.log_read(engine, fid, a.session_pk, "lines 1-10")
        infos = files.file_infos(conn, a.session_pk)
    assert len(stored) < len(text_) // 20
    assert infos[0].ref == "f_abc.txt" and infos[0].lines == 10_001


def test_delete_removes_everything_of_the_session(engine: Engine, tenant: int) -> None:
    """Deleting a session removes its turns, snapshots, files and memory, and nothing of other sessions."""
    a = sessions.append_turns(engine, tenant, "gone", [turn("user", "a")])
    b = sessions.append_turns(engine, tenant, "kept", [turn("user", "b")])
    files.save_files(engine, tenant, a.session_pk, [FileWrite("f_1.txt", "clip", "x")])
    memory.change(engine, a.session_pk, [Change("set", "notes", "v", key="k")], origin="user")
    kw = {"tokens": 1, "memory_version": 0, "state": {}, "prompt": {}, "report": {}}
    snapshots.publish(engine, a.session_pk, epoch=1, through_seq=1, **kw)
    assert sessions.delete_session(engine, tenant, "gone") == a.session_pk
    with read_tx(engine) as conn:
        for table in (sessions.TT, sessions.SN, sessions.F, memory.M, memory.E):
            assert conn.execute(select(table.c.id).where(table.c.session_id == a.session_pk)).first() is None
    assert seqs(engine, b.session_pk) == [1]
    assert sessions.delete_session(engine, tenant, "gone") is None


def test_memory_upsert_cap_render_and_prune(engine: Engine, tenant: int) -> None:
    """Memory upserts, refuses past the hard cap and renders pinned first (pruning: test_prune.py)."""
    a = sessions.append_turns(engine, tenant, "s", [turn("user", "a")])

    def put(*items: tuple[str, str, bool]) -> None:
        notes = [Change("set", "notes", v, key=k, pinned=p) for k, v, p in items]
        memory.change(engine, a.session_pk, notes, origin="user", hard_cap_tokens=100)

    put(("b", "two", False), ("a", "one", True))
    put(("b", "deux", False))
    assert memory.render(memory.load(engine, a.session_pk)) == "Notes:\n- a: one\n- b: deux"
    with pytest.raises(memory.MemoryOverCap):
        put(("c", "word " * 500, False))
    assert sessions.get_session(engine, tenant, "s").memory_version == 2  # the refusal wrote nothing


def test_sweep_finds_idle_sessions_behind_their_snapshot(engine: Engine, tenant: int) -> None:
    """Sessions with turns newer than their snapshot are listed once idle; current ones are not."""
    a = sessions.append_turns(engine, tenant, "behind", [turn("user", "a")])
    b = sessions.append_turns(engine, tenant, "current", [turn("user", "a")])
    kw = {"tokens": 1, "memory_version": 0, "state": {}, "prompt": {}, "report": {}}
    snapshots.publish(engine, b.session_pk, epoch=0, through_seq=1, **kw)
    from worker.store.tables import utcnow

    listed = {pk for _, pk, _ in snapshots.behind(engine, utcnow())}
    assert a.session_pk in listed and b.session_pk not in listed


def test_tenant_keys_are_stored_hashed_and_can_be_reset(engine: Engine) -> None:
    """A key resolves to its tenant, is not stored in clear, and a reset revokes it."""
    name = f"n-{uuid.uuid4().hex[:6]}"
    key = ensure_tenant(engine, name)
    assert key is not None and ensure_tenant(engine, name) is None
    tid = tenant_for_key(engine, key)
    with read_tx(engine) as conn:
        assert key not in str(conn.execute(text("SELECT api_key_hash FROM tenants")).all())
    new = reset_key(engine, name)
    assert tenant_for_key(engine, key) is None and tenant_for_key(engine, new) == tid


def test_migrations_are_idempotent(engine: Engine) -> None:
    """Running the migrations again changes nothing and records the newest schema version."""
    assert migrate(engine) == SCHEMA_VERSION
    assert migrate(engine) == SCHEMA_VERSION
    with read_tx(engine) as conn:
        assert conn.execute(text("SELECT version FROM schema_version")).scalar_one() == SCHEMA_VERSION
    indexes = {i["name"] for i in inspect(engine).get_indexes("turns")}
    assert "ix_turns_session_seq" in indexes


def test_migration_upgrades_an_older_schema(engine: Engine) -> None:
    """A database recorded at version 1 gets the later migrations applied and its version bumped."""
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_turns_session_seq"))
        conn.execute(text("UPDATE schema_version SET version = 1"))
    migrate(engine)
    assert "ix_turns_session_seq" in {i["name"] for i in inspect(engine).get_indexes("turns")}


def test_a_one_statement_read_cut_off_mid_query_raises_its_own_error_and_the_pool_recovers(
    pg_url: str,
) -> None:
    """A read cut off while its statement runs (as a task's soft time limit cuts it) raises what
    cut it off, not the driver's refusal to leave autocommit; its connection is not handed out
    again, and the next read works."""
    engine = make_engine(pg_url)

    class CutOff(Exception):
        pass

    def cut(signum: int, frame: object) -> None:
        raise CutOff

    previous = signal.signal(signal.SIGALRM, cut)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(CutOff):
            single_read(engine, text("SELECT pg_sleep(5)"), {})
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert single_read(engine, text("SELECT 7"), {}) == [(7,)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        engine.dispose()


def _backend_pid(engine: Engine) -> int:
    return single_read(engine, text("SELECT pg_backend_pid()"), {})[0][0]


def _terminate(pid: int) -> None:
    admin = make_engine(PG_URL)
    try:
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        admin.dispose()


def _drop_pool(engine: Engine) -> list[int]:
    """Both connections of a two-connection pool used, back in the pool, and dropped by the server."""
    with engine.connect() as a, engine.connect() as b:
        pids = [c.execute(text("SELECT pg_backend_pid()")).scalar_one() for c in (a, b)]
    for pid in pids:
        _terminate(pid)
    return pids


def test_a_pooled_connection_idle_long_enough_is_pinged_and_replaced_when_the_server_dropped_it(
    pg_url: str,
) -> None:
    """A pooled connection is pinged at checkout only after `ping_after_idle` seconds idle: when the
    server dropped the pool's connections and they sat idle that long, the first checkout's ping
    replaces them all (the reads work); one used a moment ago is handed out unpinged, so its read
    fails, and that disconnect invalidates the whole pool (as a server restart drops every
    connection): the next reads connect anew, none fails."""
    pinging = make_engine(pg_url, ping_after_idle=0.3, pool_size=2, max_overflow=0)
    try:
        dropped = _drop_pool(pinging)
        time.sleep(0.4)  # idle past the threshold: pinged, found gone, the pool replaced
        assert not {_backend_pid(pinging) for _ in range(4)} & set(dropped)
    finally:
        pinging.dispose()
    # never idle long enough to be pinged (the test's own pauses, on a loaded machine, included)
    busy = make_engine(pg_url, ping_after_idle=3600, pool_size=2, max_overflow=0)
    try:
        pids = _drop_pool(busy)
        with pytest.raises(DBAPIError) as raised:
            _backend_pid(busy)  # not pinged: its statement meets the drop
        assert raised.value.connection_invalidated
        after = {_backend_pid(busy) for _ in range(4)}  # the other one is replaced too, unpinged
        assert not after & set(pids)
    finally:
        busy.dispose()
