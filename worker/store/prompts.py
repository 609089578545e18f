"""Serving a prompt: the cached snapshot's JSON bytes plus the tail from the DB, spliced, never waiting.

The big, stable part (system and all snapshot messages but the last) is stored as final JSON bytes
and copied into the response unchanged; only the last snapshot message, the tail and the status
note are parsed and serialized per fetch, so the cost follows the tail, not the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, and_, bindparam, select

from worker.compaction.assemble import FileInfo, add_status, assemble, merge_roles, status_note
from worker.compaction.codec import transcript_from_json
from worker.compaction.model import Policy, Transcript
from worker.store.cache import Entry, PromptCache
from worker.store.db import read_tx
from worker.store.files import file_infos, last_read_id
from worker.store.memory import load_items, render
from worker.store.sessions import TT, S, load_turns
from worker.store.snapshots import latest_snapshot


@dataclass(frozen=True, slots=True)
class Served:
    body: bytes  # the response JSON
    source: str  # "cache" or "db"
    epoch: int
    version: int
    request_bytes: int = 0  # system + messages, as a provider reads them for caching
    stable_bytes: int = 0  # of which before the volatile status note: what the next fetch repeats


def entry_from_prompt(
    prompt: dict[str, Any], *, epoch: int, through: int, memver: int, tokens: int, files: Sequence[FileInfo]
) -> Entry:
    """Split an assembled {system, messages} into the fragments the fetch path splices."""
    messages = prompt["messages"]
    return Entry(
        epoch=epoch,
        through=through,
        memver=memver,
        system=orjson.dumps(prompt["system"]),
        head=b",".join(orjson.dumps(m) for m in messages[:-1]),
        last=orjson.dumps(messages[-1]) if messages else b"",
        tokens=tokens,
        files=encode_files(files),
    )


def encode_files(files: Sequence[FileInfo]) -> bytes:
    """The status note's file list as the cache entry keeps it."""
    return orjson.dumps([[f.ref, f.kind, f.lines, list(f.read_ranges)] for f in files])


def refresh_status_files(engine: Engine, cache: PromptCache, session_pk: int) -> bool:
    """After a file read: the cached entry's file list from the DB, so the next fetch's status note
    shows the read at once (not only after the next compaction)."""
    seen = cache.position(session_pk)
    if seen is None:
        # nothing cached: fetches assemble from the DB, which has the read
        return False
    with read_tx(engine) as conn:
        files = file_infos(conn, session_pk)
        reads = last_read_id(conn, session_pk)
    return cache.refresh_files(session_pk, seen, encode_files(files), reads)


def render_body(
    client_id: str, version: int, entry: Entry, tail: Sequence[tuple[str, Any, int]], policy: Policy
) -> tuple[bytes, int, int]:
    """The prompt response: snapshot fragments + tail merged onto the last message + status note.

    Also returns the request's byte length and how many of its leading bytes come before the note.
    """
    end = [orjson.loads(entry.last)] if entry.last else []
    end += [{"role": role, "content": content} for role, content, _ in tail]
    tokens = entry.tokens + sum(t for _, _, t in tail)
    files = [FileInfo(r, k, n, tuple(reads)) for r, k, n, reads in orjson.loads(entry.files)]
    note = status_note(tokens, policy.budget_tokens, files)
    merged = merge_roles(end)
    end = add_status(merged, note)
    parts = [entry.head] if entry.head else []
    parts += [orjson.dumps(m) for m in end]
    messages = b",".join(parts)
    request_bytes = len(entry.system) + len(messages)
    # the note is the last block of the last message: `,{note}]}` is all that differs next time
    note_bytes = len(orjson.dumps({"type": "text", "text": note})) + 3 if end is not merged else 0
    body = b"".join(
        (
            b'{"session_id":',
            orjson.dumps(client_id),
            b',"version":%d,"epoch":%d,"compacted_through":%d,"token_count":%d,"budget_tokens":%d'
            % (version, entry.epoch, entry.through, tokens, policy.budget_tokens),
            b',"system":',
            entry.system,
            b',"messages":[',
            messages,
            b"]}",
        )
    )
    return body, request_bytes, request_bytes - note_bytes


# Built once: constructing a select per request costs more than running it.
_TAIL = (
    select(
        S.c.id,
        S.c.version,
        S.c.epoch,
        S.c.memory_version,
        S.c.context_window,
        S.c.output_reserve,
        TT.c.role,
        TT.c.content,
        TT.c.tokens,
    )
    .select_from(S.outerjoin(TT, and_(TT.c.session_id == S.c.id, TT.c.seq > bindparam("after"))))
    .where(S.c.tenant_id == bindparam("tenant_id"), S.c.client_id == bindparam("client_id"))
    .order_by(TT.c.seq)
)
_PK = select(S.c.id).where(S.c.tenant_id == bindparam("tenant_id"), S.c.client_id == bindparam("client_id"))


def fetch(
    engine: Engine, cache: PromptCache | None, tenant_id: int, client_id: str, policy_for: Any
) -> Served | None:
    """The session's prompt: every appended turn, from the cache when it is current, else from the DB."""
    entry, pk = None, None
    if cache is not None:
        pk = session_pk(engine, tenant_id, client_id, cache)
        if pk is None:
            return None
        entry = cache.get(pk)
    after = entry.through if entry else 0
    if entry is not None:
        rows = _tail_rows(engine, tenant_id, client_id, after)
        if not rows:
            return None
        head = rows[0]
        if head[0] == pk and entry.epoch >= head[2] and entry.memver >= head[3]:
            policy = policy_for(head[4], head[5])
            tail = [(r[6], orjson.loads(r[7]), r[8]) for r in rows if r[6] is not None]
            body, total, stable = render_body(client_id, head[1], entry, tail, policy)
            return Served(body, "cache", entry.epoch, head[1], total, stable)
    with read_tx(engine) as conn:
        rows = conn.execute(_TAIL, {"tenant_id": tenant_id, "client_id": client_id, "after": after}).all()
        if not rows:
            return None
        head = rows[0]
        return _from_db(conn, client_id, head, policy_for(head.context_window, head.output_reserve))


def _tail_rows(engine: Engine, tenant_id: int, client_id: str, after: int) -> Sequence[Any]:
    """The session row joined with its turns after `after`: one query on a pooled DBAPI connection.

    The hot path: SQLAlchemy's statement execution costs more than the query itself here.
    """
    sql = _RAW_TAIL.get(engine.dialect.paramstyle)
    if sql is None:
        sql = _RAW_TAIL[engine.dialect.paramstyle] = str(
            _TAIL.compile(dialect=engine.dialect, compile_kwargs={"render_postcompile": True})
        )
    params: Any
    if engine.dialect.paramstyle == "qmark":
        params = (after, tenant_id, client_id)
    else:
        params = {"after": after, "tenant_id": tenant_id, "client_id": client_id}
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(sql, params)
        rows = cur.fetchall()
        cur.close()
    finally:
        raw.close()
    return rows


_RAW_TAIL: dict[str, str] = {}


def _from_db(conn: Connection, client_id: str, session: Any, policy: Policy) -> Served:
    snap = latest_snapshot(conn, session.id)
    row = conn.execute(select(S.c.system).where(S.c.id == session.id)).one()
    items = load_items(conn, session.id)
    memory = render(items)
    if snap is None:
        state, through, epoch, tokens = Transcript(system=row.system, turns=()), 0, 0, 0
    else:
        state = transcript_from_json(orjson.loads(snap.state))
        through, epoch, tokens = snap.through_seq, snap.epoch, snap.tokens
    if snap is not None and snap.memory_version == session.memory_version:
        prompt = orjson.loads(snap.prompt)
    else:
        prompt = assemble(replace(state, system=row.system, memory=memory))
    entry = entry_from_prompt(
        prompt,
        epoch=epoch,
        through=through,
        memver=session.memory_version,
        tokens=tokens,
        files=file_infos(conn, session.id),
    )
    tail = [(t.role, list(t.content), t.tokens) for t in load_turns(conn, session.id, through)]
    body, total, stable = render_body(client_id, session.version, entry, tail, policy)
    return Served(body, "db", epoch, session.version, total, stable)


def session_pk(engine: Engine, tenant_id: int, client_id: str, cache: PromptCache) -> int | None:
    # A session's pk never changes while it exists; a stale one (deleted elsewhere) only costs a
    # cache miss, because fetch() checks it against the row it reads.
    key = (tenant_id, client_id)
    pks = cache.pks
    pk = pks.get(key)
    if pk is None:
        with read_tx(engine) as conn:
            pk = conn.execute(
                select(S.c.id).where(S.c.tenant_id == tenant_id, S.c.client_id == client_id)
            ).scalar()
        if pk is None:
            return None
        if len(pks) > 100_000:
            pks.clear()
        pks[key] = pk
    return pk


def request_prefix(entry: Entry) -> bytes:
    """The snapshot's part of the request bytes (system, then messages), for reuse accounting."""
    return entry.system + entry.head + (b"," if entry.head and entry.last else b"") + entry.last


def forget(cache: PromptCache, tenant_id: int, client_id: str) -> None:
    cache.pks.pop((tenant_id, client_id), None)
