"""The database: engine set-up per backend, write transactions that serialize, schema upgrades."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.exc import DBAPIError, InvalidatePoolError
from sqlmodel import SQLModel

from worker.store import tables

if TYPE_CHECKING:
    from worker.settings import Settings

# memory_items {key, value, pinned} become 'notes' entries written by the user, each with the
# event that set it (so history replays to them); then memory_items goes. The CREATE makes the
# copy a no-op on a database that never had the table.
MEMORY_ITEMS_TO_ENTRIES = [
    "CREATE TABLE IF NOT EXISTS memory_items (id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL,"
    ' "key" VARCHAR NOT NULL, value TEXT NOT NULL, pinned BOOLEAN NOT NULL, tokens INTEGER NOT NULL,'
    " updated_at TIMESTAMP NOT NULL)",
    'INSERT INTO memory_entries (tenant_id, session_id, scope, section, "key", value, origin,'
    " source_seq, status, pinned, tokens, written_by, created_at, updated_at, referenced_at)"
    " SELECT s.tenant_id, m.session_id, '', 'notes', m.\"key\", m.value, 'user', NULL, 'open',"
    " m.pinned, m.tokens, m.session_id, m.updated_at, m.updated_at, m.updated_at"
    " FROM memory_items m JOIN sessions s ON s.id = m.session_id WHERE 1 = 1 ON CONFLICT DO NOTHING",
    'INSERT INTO memory_events (tenant_id, session_id, scope, version, at, op, section, "key",'
    ' "before", "after", status, origin, reason, source_seq, pinned, written_by)'
    " SELECT s.tenant_id, m.session_id, '', s.memory_version, m.updated_at, 'set', 'notes',"
    " m.\"key\", NULL, m.value, 'open', 'user', 'migrated from memory_items', NULL, m.pinned,"
    " m.session_id FROM memory_items m JOIN sessions s ON s.id = m.session_id",
    "DROP TABLE IF EXISTS memory_items",
]

Step = str | Callable[[Connection], None]


def add_column(table: str, column: str, ddl: str) -> Step:
    """A step adding a column unless the table has it (create_all built it, or an earlier run did):
    SQLite has no ADD COLUMN IF NOT EXISTS."""

    def step(conn: Connection) -> None:
        if column not in {c["name"] for c in inspect(conn).get_columns(table)}:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))

    return step


# (version, steps). Each step is idempotent on both backends, so running the list again (or
# after create_all already built the newest shape) changes nothing.
MIGRATIONS: list[tuple[int, list[Step]]] = [
    (1, []),  # baseline: create_all builds the tables
    (2, ["CREATE INDEX IF NOT EXISTS ix_turns_session_seq ON turns (session_id, seq)"]),
    (3, ["CREATE INDEX IF NOT EXISTS ix_sessions_sweep ON sessions (compacted_through, version)"]),
    (4, list(MEMORY_ITEMS_TO_ENTRIES)),
    # the last turn seq the worker has observed into working memory
    (5, [add_column("sessions", "memory_observed_through", "INTEGER NOT NULL DEFAULT 0")]),
    # the memory version a snapshot's pinned block renders (later changes go to the memory notes of later user turns)
    (
        6,
        [
            add_column("snapshots", "pinned_memory_version", "INTEGER NOT NULL DEFAULT 0"),
            # a snapshot from before rendered the memory of its own version
            "UPDATE snapshots SET pinned_memory_version = memory_version",
        ],
    ),
    # keys move to api_keys (revocation, rotation): each tenant's key keeps working there
    (
        7,
        [
            "INSERT INTO api_keys (tenant_id, key_hash, key_id, prefix, created_at)"
            " SELECT id, api_key_hash, substr(api_key_hash, 1, 12), '', created_at FROM tenants"
            " WHERE 1 = 1 ON CONFLICT DO NOTHING"
        ],
    ),
    # the memory version a prompt already shows (its pinned block or a memory note in its turns):
    # the next user turn notes what changed after it; a session from before noted its pinned block
    (
        8,
        [
            add_column("sessions", "noted_memory_version", "INTEGER NOT NULL DEFAULT 0"),
            add_column("sessions", "notes_restate", "BOOLEAN NOT NULL DEFAULT FALSE"),
            add_column("sessions", "cache_ttl_seconds", "INTEGER"),
            "UPDATE sessions SET noted_memory_version = snapshot_memory_version",
        ],
    ),
    # provider keys per provider (an OpenAI key beside the Anthropic one): the held keys move over
    (
        9,
        [
            "INSERT INTO provider_keys (tenant_id, provider, sealed, key_id, updated_at)"
            " SELECT tenant_id, 'anthropic', sealed, key_id, updated_at FROM tenant_provider_keys"
            " WHERE 1 = 1 ON CONFLICT DO NOTHING"
        ],
    ),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def normalize_url(url: str) -> str:
    """postgresql:// means psycopg 3 here (psycopg2 is not installed)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def engine_for(settings: Settings) -> Engine:
    """The deployment's database engine, with its lock and idle-transaction timeouts (make_engine)."""
    return make_engine(
        settings.database_url,
        lock_timeout=settings.db_lock_timeout_seconds,
        idle_transaction_timeout=settings.db_idle_transaction_timeout_seconds,
    )


def make_engine(
    url: str,
    *,
    lock_timeout: float = 5.0,
    idle_transaction_timeout: float = 30.0,
    ping_after_idle: float = 1.0,
    **kwargs: Any,
) -> Engine:
    """An engine whose write transactions serialize: BEGIN IMMEDIATE on SQLite, row locks on PostgreSQL.

    On PostgreSQL a lock wait gives up after `lock_timeout` seconds (an append answers 503 rather
    than hang), and the server ends a session left idle inside a transaction for
    `idle_transaction_timeout` seconds, rolling it back and releasing its locks: a process frozen
    mid-transaction (SIGSTOP, a paused VM, a partition) cannot hold a session's row forever.
    Every transaction here is short: no LLM or Redis call runs inside one, and the most an append's
    does besides SQL is validate its turns and re-redact a seam (milliseconds).

    A pooled PostgreSQL connection is pinged before use only after `ping_after_idle` seconds idle
    (_ping_when_idle), not at every checkout (pool_pre_ping: a round trip each, two or three per
    proxied call).
    """
    url = normalize_url(url)
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        if path and ":memory:" not in path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30, "isolation_level": None},
            **kwargs,
        )
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    engine = create_engine(url, **{"pool_size": 10, "max_overflow": 20, **kwargs})
    _ping_when_idle(engine, ping_after_idle)
    timeouts = {
        "lock_timeout": round(lock_timeout * 1000),
        "idle_in_transaction_session_timeout": round(idle_transaction_timeout * 1000),
    }
    event.listen(engine, "connect", lambda dbapi_conn, _record: _postgres_connect(dbapi_conn, timeouts))
    return engine


def _ping_when_idle(engine: Engine, idle_seconds: float) -> None:
    """Ping a pooled connection at checkout when it has been idle `idle_seconds` or more; a dead one
    is replaced there, and with it every connection made before (InvalidatePoolError, as
    pool_pre_ping does: the server went away, so the others are gone too). One checked in a moment ago is
    almost surely alive and is handed out as is: if the server dropped it all the same (a restart
    while busy), its statement fails, SQLAlchemy invalidates the pool, and the request answers as
    with the database down (503, retried by the client); the next checkouts connect anew."""

    def checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < idle_seconds:
            return  # connected for this checkout, or in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            if engine.dialect.is_disconnect(exc, dbapi_conn, None):
                raise InvalidatePoolError("the pooled connection is gone") from exc
            raise

    event.listen(engine, "checkin", checkin)
    event.listen(engine, "checkout", checkout)


def _postgres_connect(dbapi_conn: Any, timeouts: dict[str, int]) -> None:
    # session settings, outside any transaction (a URL's own `options`, e.g. search_path, still apply)
    autocommit = dbapi_conn.autocommit
    dbapi_conn.autocommit = True
    with dbapi_conn.cursor() as cur:
        for name, ms in timeouts.items():
            cur.execute(f"SET {name} = {int(ms)}")
    dbapi_conn.autocommit = autocommit


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _sqlite_begin(conn: Connection) -> None:
    # pysqlite's own BEGIN is deferred; a writer must take the lock up front or two appends
    # could both read the same version before either writes.
    write = conn.get_execution_options().get("write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


_READERS: weakref.WeakKeyDictionary[Engine, threading.local] = weakref.WeakKeyDictionary()
_READERS_LOCK = threading.Lock()


def sqlite_reader(engine: Engine) -> Any:
    """This thread's own DBAPI connection to a SQLite engine's file, for single-statement reads on
    the fetch path: a pool checkout and return cost ~4x the tail query itself (~18 of ~24 us).

    Made by the engine (its connect pragmas applied) and detached from the pool, so it is never
    handed to another thread or counted as checked out. The engine runs SQLite in autocommit mode
    (isolation_level None): each SELECT is its own read snapshot, nothing stays open between them.
    """
    local = _READERS.get(engine)
    if local is None:
        with _READERS_LOCK:
            local = _READERS.setdefault(engine, threading.local())
    conn = getattr(local, "conn", None)
    if conn is None:
        fairy = engine.raw_connection()
        fairy.detach()
        conn = local.conn = fairy.dbapi_connection
    return conn


def drop_sqlite_reader(engine: Engine) -> None:
    """Close this thread's reader (after an error: the next read opens a fresh one)."""
    local = _READERS.get(engine)
    conn = getattr(local, "conn", None)
    if conn is not None:
        local.conn = None  # type: ignore[union-attr]
        conn.close()


_RAW_SQL: dict[tuple[int, str], tuple[str, tuple[str, ...] | None, dict[str, Any]]] = {}


def raw_rows(conn: Connection, stmt: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Rows (plain tuples, untyped: only for columns the driver returns as is, no datetimes) of a
    module-level, built-once statement run on `conn`'s DBAPI connection, in its transaction.

    SQLAlchemy's execute costs ~50 us a statement here (cache key, context, result) against ~3 us
    for the query itself: the append path's reads go this way.
    """
    return run_raw(conn.connection.dbapi_connection, conn.dialect, stmt, params)


def raw_write(conn: Connection, stmt: Any, rows: Sequence[dict[str, Any]]) -> None:
    """A built-once INSERT or UPDATE run for each of `rows` on `conn`'s DBAPI connection, in its
    transaction: the parameters converted by their column types as SQLAlchemy would (datetimes)."""
    sql, order, processors = _compiled(stmt, conn.dialect)
    args = [_args(row, order, processors) for row in rows]
    with _cursor(conn.connection.dbapi_connection, conn.dialect, sql, args) as cur:
        cur.executemany(sql, args)


def raw_update(conn: Connection, stmt: Any, params: dict[str, Any]) -> int:
    """raw_write of one row, and how many rows it changed."""
    sql, order, processors = _compiled(stmt, conn.dialect)
    args = _args(params, order, processors)
    with _cursor(conn.connection.dbapi_connection, conn.dialect, sql, args) as cur:
        cur.execute(sql, args)
        return int(cur.rowcount)


def sqlite_rows(engine: Engine, stmt: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """raw_rows of one statement outside any transaction, on this thread's sqlite_reader."""
    dbapi_error = engine.dialect.loaded_dbapi.Error
    try:
        conn = sqlite_reader(engine)
    except dbapi_error as exc:  # opening it: wrapped as the statement's errors are
        raise DBAPIError.instance(None, None, exc, dbapi_error) from exc
    try:
        return run_raw(conn, engine.dialect, stmt, params)
    except Exception:
        drop_sqlite_reader(engine)
        raise


def single_read(engine: Engine, stmt: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """raw_rows of one statement outside any transaction: on SQLite this thread's sqlite_reader; on
    any other database a pooled connection put in autocommit for the statement, so that it is its
    own snapshot with nothing to end (in a transaction, the BEGIN rides with the statement but the
    ROLLBACK or COMMIT after it is a round trip of its own)."""
    if is_sqlite(engine):
        return sqlite_rows(engine, stmt, params)
    dbapi_error = engine.dialect.loaded_dbapi.Error
    try:
        raw = engine.raw_connection()
    except dbapi_error as exc:
        # the raw checkout skips SQLAlchemy's wrapping: wrap here, so callers see one kind of error
        raise DBAPIError.instance(None, None, exc, dbapi_error) from exc
    try:
        dbapi_conn: Any = raw.dbapi_connection
        dbapi_conn.autocommit = True  # idle after the checkout (a ping at checkout runs in autocommit too)
        try:
            return run_raw(dbapi_conn, engine.dialect, stmt, params)
        except DBAPIError as exc:
            if isinstance(exc.orig, dbapi_error) and engine.dialect.is_disconnect(exc.orig, dbapi_conn, None):
                # as SQLAlchemy's own statements do: the server went away, so every connection
                # made before now is replaced at its next checkout, not only this one
                engine.pool._invalidate(raw, exc.orig, _checkin=False)  # this one: _leave_autocommit
                exc.connection_invalidated = True
            raise
        finally:
            _leave_autocommit(raw, dbapi_conn)
    finally:
        raw.close()


def _leave_autocommit(raw: Any, dbapi_conn: Any) -> None:
    """The connection back in transaction mode for the pool; one that is not idle (its statement
    cut off, say by a task's soft time limit) or is broken is invalidated instead: never handed out
    again, and the exception that cut it off is the one raised, not the driver's refusal."""
    from psycopg.pq import TransactionStatus

    with suppress(Exception):  # a driver that refuses: the connection is not fit to go back
        if not dbapi_conn.closed and dbapi_conn.info.transaction_status == TransactionStatus.IDLE:
            dbapi_conn.autocommit = False
            return
    raw.invalidate()


def _compiled(stmt: Any, dialect: Any) -> tuple[str, tuple[str, ...] | None, dict[str, Any]]:
    """(SQL, positional parameter order or None, parameter converters), once per (statement, dialect)."""
    key = (id(stmt), dialect.name)
    compiled = _RAW_SQL.get(key)
    if compiled is None:
        done = stmt.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
        order = tuple(done.positiontup or ()) if dialect.positional else None
        compiled = _RAW_SQL[key] = (str(done), order, dict(done._bind_processors))
    return compiled


def _args(params: dict[str, Any], order: tuple[str, ...] | None, processors: dict[str, Any]) -> Any:
    if processors:
        params = {k: processors[k](v) if k in processors else v for k, v in params.items()}
    return params if order is None else tuple(params[k] for k in order)


def run_raw(dbapi_conn: Any, dialect: Any, stmt: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Rows of `stmt`, compiled once per (statement, dialect), run on a DBAPI connection."""
    sql, order, processors = _compiled(stmt, dialect)
    args = _args(params, order, processors)
    with _cursor(dbapi_conn, dialect, sql, args) as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


@contextmanager
def _cursor(dbapi_conn: Any, dialect: Any, sql: str, args: Any) -> Iterator[Any]:
    """A cursor of the DBAPI connection, closed after use; a driver error is wrapped as SQLAlchemy's
    would be (DBAPIError), so callers see one kind of error."""
    dbapi_error = dialect.loaded_dbapi.Error
    try:
        cur = dbapi_conn.cursor()
        try:
            yield cur
        finally:
            cur.close()
    except dbapi_error as exc:
        raise DBAPIError.instance(sql, args, exc, dbapi_error) from exc


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


@contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: serialized with other writers on SQLite from its start."""
    with engine.connect().execution_options(write=True) as conn, conn.begin():
        yield conn


@contextmanager
def read_tx(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn, conn.begin():
        yield conn


def migrate(engine: Engine) -> int:
    """Create missing tables and apply pending migrations; safe to run from many processes at once."""
    with write_tx(engine) as conn:
        if not is_sqlite(engine):
            # one migrator at a time across API replicas and workers; the others wait as long as
            # it takes (a migration may outlast the lock timeout)
            conn.execute(text("SET LOCAL lock_timeout = 0"))
            conn.execute(text("SELECT pg_advisory_xact_lock(7012001)"))
        SQLModel.metadata.create_all(conn, tables=_tables())
        row = conn.execute(text("SELECT version FROM schema_version WHERE id = 1")).first()
        current = row[0] if row else 0
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                if isinstance(statement, str):
                    conn.execute(text(statement))
                else:
                    statement(conn)
        if row is None:
            conn.execute(
                text("INSERT INTO schema_version (id, version) VALUES (1, :v)"), {"v": SCHEMA_VERSION}
            )
        elif current < SCHEMA_VERSION:
            conn.execute(text("UPDATE schema_version SET version = :v WHERE id = 1"), {"v": SCHEMA_VERSION})
    return SCHEMA_VERSION


def _tables() -> list[Any]:
    return [
        getattr(tables, name).__table__  # type: ignore[attr-defined]
        for name in (
            "Tenant",
            "ApiKey",
            "Session",
            "Turn",
            "Append",
            "Snapshot",
            "SnapshotLog",
            "File",
            "FileRead",
            "MemoryEntry",
            "MemoryEvent",
            "ProxyConversation",
            "TenantProviderKey",
            "ProviderKey",
            "ProxyResponse",
            "TenantUpstream",
            "SchemaVersion",
        )
    ]


def insert_ignore(engine: Engine) -> Callable[..., Any]:
    """The dialect's INSERT with ON CONFLICT DO NOTHING support."""
    if is_sqlite(engine):
        from sqlalchemy.dialects.sqlite import insert
    else:
        from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
    return insert
