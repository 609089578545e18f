"""Sessions and their turns: appends that serialize per session, activity, metadata, deletion."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, bindparam, delete, func, insert, select, update

from worker.compaction.assemble import MEMORY_NOTE_TOKENS, assemble, with_memory_note
from worker.compaction.codec import transcript_from_json, transcript_to_json
from worker.compaction.model import Block, Turn, canonical_json, content_hash
from worker.compaction.tokens import count_message
from worker.ingest import rewrite_turn_end
from worker.redaction.seams import Reseamed
from worker.store import memory as memory_store
from worker.store.db import insert_ignore, is_sqlite, raw_rows, raw_write, read_tx, single_read, write_tx
from worker.store.tables import Append, File, FileRead, ProxyResponse, Snapshot, SnapshotLog, utcnow
from worker.store.tables import Session as SessionTable
from worker.store.tables import Turn as TurnTable

S = SessionTable.__table__  # type: ignore[attr-defined]
TT = TurnTable.__table__  # type: ignore[attr-defined]
A = Append.__table__  # type: ignore[attr-defined]
SN = Snapshot.__table__  # type: ignore[attr-defined]
SL = SnapshotLog.__table__  # type: ignore[attr-defined]
F = File.__table__  # type: ignore[attr-defined]
FR = FileRead.__table__  # type: ignore[attr-defined]
PR = ProxyResponse.__table__  # type: ignore[attr-defined]

# Stands for everything before the validation window, so the window starts with a user message.
EARLIER = {"role": "user", "content": [{"type": "text", "text": "(earlier turns)"}]}
WINDOW_TURNS = 64


class StoreError(Exception):
    """Root of the store's errors."""


class IdempotencyMismatch(StoreError):
    """Raised when an Idempotency-Key is reused with a different request body."""


@dataclass(frozen=True, slots=True)
class Profile:
    """Per-session model profile and creation-time fields (None: keep what is stored)."""

    model: str | None = None
    context_window: int | None = None
    output_reserve: int | None = None
    system: str | None = None
    parent_session_id: str | None = None
    parent_tool_use_id: str | None = None
    cache_ttl_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    session_pk: int
    tenant_id: int
    first_seq: int
    last_seq: int
    version: int
    replayed: bool = False  # an idempotent retry: nothing was written
    reseamed: bool = False  # a secret across the boundary with the turn before was redacted in both
    context_window: int | None = None  # the session's own window after the append (None: the default)
    output_reserve: int | None = None  # the session's own output reserve after the append
    system_changed: bool = False  # the append brought a new system prompt (the prompt's head changes)


Validator = Callable[[list[dict[str, Any]], list[dict[str, Any]]], None]
# (the stored last message, the new first one) -> both redacted where a secret crosses them, or None
Seam = Callable[[tuple[Block, ...], tuple[Block, ...]], Reseamed | None]


def request_hash(payload: Any) -> str:
    return content_hash(canonical_json(payload))


def append_turns(
    engine: Engine,
    tenant_id: int,
    client_id: str,
    turns: Sequence[Turn],
    *,
    files: Sequence[Any] = (),
    profile: Profile = Profile(),
    activity: str | None = None,
    idempotency_key: str | None = None,
    body_hash: str = "",
    validate: Validator | None = None,
    seam: Seam | None = None,
    locked: Callable[[Connection, Any], None] | None = None,
    now: datetime | None = None,
    memory_note: bool = True,
    noted_through: int | None = None,
) -> Appended:
    """Append turns (numbered from the session's version + 1) in one transaction.

    The session row is created on first append and locked for the whole transaction, so
    concurrent appends get contiguous seqs. `validate(window, new)` may raise to abort it all;
    so may `locked(conn, session row)`, run first with the row locked (the proxy's record moves there).
    With `memory_note`, an append that ends with a user turn carries the working-memory changes
    its prompt does not show yet, in that turn (`noted`); False when its turns were already served
    as they are (the proxy's call sent before its commit), their note, if any, covering the memory
    through `noted_through`.

    Long on purpose (~90 lines, 15 of them the signature): the session lock, the idempotency check,
    validation against the stored window, the seam rewrite and the inserts must share one
    transaction and read in order; split, they would pass the connection and half-read rows around.
    """
    from worker.store.files import save_files_conn

    now = now or utcnow()
    with write_tx(engine) as conn:
        row = _lock_session(conn, engine, tenant_id, client_id, profile, now)
        pk = row.id
        if locked is not None:
            locked(conn, row)
        if idempotency_key is not None:
            prior = raw_rows(conn, _PRIOR, {"pk": pk, "key": idempotency_key})
            if prior:
                request_hash_, first_seq, last_seq = prior[0]
                if request_hash_ != body_hash:
                    raise IdempotencyMismatch(idempotency_key)
                return Appended(pk, tenant_id, first_seq, last_seq, last_seq, True, row.context_window)
        # only a real append changes the profile: a retry must not put back an older one
        system_changed = _apply_profile(conn, row, profile)
        if validate is not None:
            validate(window_messages(conn, pk, row.version), [t.as_message() for t in turns])
        reseamed, delta = False, 0
        if seam is not None and row.version > 0 and turns:
            turns, reseamed, delta = _reseam(conn, row, list(turns), seam)
        noted_to = noted_through
        if (
            memory_note
            and turns
            and turns[-1].role == "user"
            and row.memory_version > row.noted_memory_version
        ):
            turns = noted(conn, row.id, row.noted_memory_version, turns, observed=bool(row.notes_restate))
            noted_to = row.memory_version
        first = row.version + 1
        numbered = [replace(t, seq=first + i) for i, t in enumerate(turns)]
        raw_write(
            conn,
            _INSERT_TURNS,
            [
                {
                    "session_id": pk,
                    "seq": t.seq,
                    "role": t.role,
                    "content": orjson.dumps(list(t.content)).decode(),
                    "content_hash": content_hash(canonical_json(list(t.content))),
                    "tokens": t.tokens,
                    "idempotency_key": idempotency_key,
                    "created_at": now,
                }
                for t in numbered
            ],
        )
        last = numbered[-1].seq
        values: dict[str, Any] = {
            "pk": pk,
            "p_version": last,
            "p_last_append_at": now,
            "p_tokens": row.tokens + delta + sum(t.tokens for t in numbered),
        }
        if activity is not None:
            raw_write(conn, _BUMP_ACTIVE, [{**values, "p_activity": activity}])
        else:
            raw_write(conn, _BUMP, [values])
        if noted_to is not None and noted_to > row.noted_memory_version:
            raw_write(conn, _NOTED, [{"pk": pk, "p_noted": noted_to, "p_restate": False}])
        if idempotency_key is not None:
            raw_write(
                conn,
                _INSERT_APPEND,
                [
                    {
                        "session_id": pk,
                        "idempotency_key": idempotency_key,
                        "request_hash": body_hash,
                        "first_seq": first,
                        "last_seq": last,
                        "created_at": now,
                    }
                ],
            )
        if files:
            save_files_conn(conn, engine, tenant_id, pk, files)
    window = profile.context_window or row.context_window
    reserve = profile.output_reserve if profile.output_reserve is not None else row.output_reserve
    return Appended(
        pk,
        tenant_id,
        first,
        last,
        last,
        context_window=window,
        output_reserve=reserve,
        reseamed=reseamed,
        system_changed=system_changed,
    )


def noted(
    conn: Connection, session_pk: int, shown_version: int, turns: Sequence[Turn], *, observed: bool
) -> list[Turn]:
    """The turns with the memory changes since the version the session's prompt shows appended to
    the last one (a user turn): a block of its own, part of the turn from now on, so within an
    epoch the prompt only grows (worker/compaction/assemble.py, memory_note_block). What the worker
    observed from the turns is left to them (they show it) unless `observed` (a summary archived
    turns since the block: `notes_restate`)."""
    changes = memory_store.changes_since(
        conn, session_pk, shown_version, MEMORY_NOTE_TOKENS, since="it was last shown", observed=observed
    )
    return [*turns[:-1], with_memory_note(turns[-1], changes)] if changes else list(turns)


def _reseam(conn: Connection, row: Any, turns: list[Turn], seam: Seam) -> tuple[list[Turn], bool, int]:
    """A secret split between the stored last turn and this append's first: the stored turn is
    rewritten, and the text taken from it is scrubbed from the session's snapshots (it may already
    be compacted into one) when long enough not to match elsewhere by chance."""
    found = raw_rows(conn, _STORED, {"pk": row.id, "seq": row.version})
    if not found:
        return turns, False, 0
    stored_content, stored_tokens = found[0]
    fixed = seam(tuple(orjson.loads(stored_content)), turns[0].content)
    if fixed is None:
        return turns, False, 0
    content = list(fixed.previous)
    tokens = count_message(fixed.previous)
    conn.execute(
        update(TT)
        .where(TT.c.session_id == row.id, TT.c.seq == row.version)
        .values(
            content=orjson.dumps(content).decode(),
            content_hash=content_hash(canonical_json(content)),
            tokens=tokens,
        )
    )
    taken, put = fixed.taken
    if taken and row.compacted_through >= row.version:  # compacted already: its snapshots hold it
        for snap in conn.execute(select(SN.c.id, SN.c.state).where(SN.c.session_id == row.id)).all():
            state = transcript_from_json(orjson.loads(snap.state))
            turns_now = rewrite_turn_end(state.turns, row.version, taken, put)
            if turns_now is not None:
                state = state.with_turns(turns_now)
                conn.execute(
                    update(SN)
                    .where(SN.c.id == snap.id)
                    .values(
                        state=orjson.dumps(transcript_to_json(state)).decode(),
                        prompt=orjson.dumps(assemble(state)).decode(),
                    )
                )
    first = turns[0]
    new_first = replace(first, content=fixed.first, tokens=count_message(fixed.first))
    return [new_first, *turns[1:]], True, tokens - stored_tokens


def _lock_session(
    conn: Connection, engine: Engine, tenant_id: int, client_id: str, profile: Profile, now: datetime
) -> Any:
    ids = {"tenant_id": tenant_id, "client_id": client_id}
    query = _ROW if is_sqlite(engine) else _ROW_FOR_UPDATE
    if not is_sqlite(engine) or profile.parent_session_id is not None:
        existing = None
    else:
        # an existing session (every append but the first): no INSERT to try
        existing = conn.execute(query, ids).first()
    if existing is not None:
        return existing
    parent_pk = None
    if profile.parent_session_id is not None:
        parent_pk = conn.execute(
            _SESSION_PK, {"tenant_id": tenant_id, "client_id": profile.parent_session_id}
        ).scalar()
    values = {
        "system": profile.system or "",
        "model": profile.model,
        "context_window": profile.context_window,
        "output_reserve": profile.output_reserve,
        "parent_session_id": parent_pk,
        "parent_tool_use_id": profile.parent_tool_use_id,
        "activity": "idle",
        "last_append_at": now,
        "created_at": now,
        **_NEW_SESSION,
        **ids,
    }
    conn.execute(_create_session(engine), values)
    return conn.execute(query, ids).one()


# Built once: constructing a statement per append costs more than running it (~0.25 ms each here);
# the reads among them run through raw_rows (compiled once per dialect, ~50 us less each).
_NEW_SESSION = {
    "version": 0,
    "epoch": 0,
    "compacted_through": 0,
    "memory_version": 0,
    "snapshot_memory_version": 0,
    "tokens": 0,
}
# what a new session row is created with, besides _NEW_SESSION's zeros
_CREATED_WITH = (
    "tenant_id",
    "client_id",
    "system",
    "model",
    "context_window",
    "output_reserve",
    "parent_session_id",
    "parent_tool_use_id",
    "activity",
    "last_append_at",
    "created_at",
)
_SESSION_PK = select(S.c.id).where(
    S.c.tenant_id == bindparam("tenant_id"), S.c.client_id == bindparam("client_id")
)
_ROW = select(S).where(S.c.tenant_id == bindparam("tenant_id"), S.c.client_id == bindparam("client_id"))
_ROW_FOR_UPDATE = _ROW.with_for_update()
_PRIOR = select(A.c.request_hash, A.c.first_seq, A.c.last_seq).where(
    A.c.session_id == bindparam("pk"), A.c.idempotency_key == bindparam("key")
)
_STORED = select(TT.c.content, TT.c.tokens).where(
    TT.c.session_id == bindparam("pk"), TT.c.seq == bindparam("seq")
)
_WINDOW = (
    select(TT.c.role, TT.c.content)
    .where(TT.c.session_id == bindparam("pk"), TT.c.seq > bindparam("after"))
    .order_by(TT.c.seq)
)
_LAST_MESSAGE = (
    select(S.c.id, TT.c.role, TT.c.content)
    .select_from(S.join(TT, (TT.c.session_id == S.c.id) & (TT.c.seq == S.c.version)))
    .where(S.c.tenant_id == bindparam("tenant_id"), S.c.client_id == bindparam("client_id"))
)
# the writes too run as compiled once (raw_write): every column given, none with an onupdate
_TURN_COLUMNS = (
    "session_id",
    "seq",
    "role",
    "content",
    "content_hash",
    "tokens",
    "idempotency_key",
    "created_at",
)
_APPEND_COLUMNS = ("session_id", "idempotency_key", "request_hash", "first_seq", "last_seq", "created_at")
_INSERT_TURNS = insert(TT).values({c: bindparam(c) for c in _TURN_COLUMNS})
_INSERT_APPEND = insert(A).values({c: bindparam(c) for c in _APPEND_COLUMNS})
_BUMP = (
    update(S)
    .where(S.c.id == bindparam("pk"))
    .values(
        version=bindparam("p_version"),
        last_append_at=bindparam("p_last_append_at"),
        tokens=bindparam("p_tokens"),
    )
)
_BUMP_ACTIVE = _BUMP.values(activity=bindparam("p_activity"))
_NOTED = (
    update(S)
    .where(S.c.id == bindparam("pk"))
    .values(noted_memory_version=bindparam("p_noted"), notes_restate=bindparam("p_restate"))
)
_CREATE: dict[str, Any] = {}


def _create_session(engine: Engine) -> Any:
    """The dialect's INSERT of a new session row that does nothing when it exists (built once)."""
    stmt = _CREATE.get(engine.dialect.name)
    if stmt is None:
        columns = [*_NEW_SESSION, *_CREATED_WITH]
        stmt = _CREATE[engine.dialect.name] = (
            insert_ignore(engine)(S)
            .values({c: bindparam(c) for c in columns})
            .on_conflict_do_nothing(index_elements=["tenant_id", "client_id"])
        )
    return stmt


def _apply_profile(conn: Connection, row: Any, profile: Profile) -> bool:
    """Store what the append's profile changes: model, window, reserve, cache lifetime, system
    prompt; whether the system prompt changed."""
    changes: dict[str, Any] = {
        k: getattr(profile, k)
        for k in ("model", "context_window", "output_reserve", "cache_ttl_seconds")
        if getattr(profile, k) is not None and getattr(profile, k) != getattr(row, k)
    }
    if profile.system is not None and profile.system != row.system:
        # a new system prompt changes the prompt's head: the cached prompt is dropped (the next
        # fetch assembles it from the database) and the next compaction publishes a new epoch
        changes |= {"system": profile.system, "memory_version": row.memory_version + 1}
    if changes:
        conn.execute(update(S).where(S.c.id == row.id).values(**changes))
    return "system" in changes


def window_messages(conn: Connection, session_pk: int, version: int) -> list[dict[str, Any]]:
    """The stored messages a new append must be consistent with: the last assistant group and after.

    Starts with a stand-in user message, so the window is a well-formed conversation by itself.
    """
    if version == 0:
        return []
    rows = raw_rows(conn, _WINDOW, {"pk": session_pk, "after": version - WINDOW_TURNS})
    j = window_start(lambda k: rows[k][0], len(rows))
    if j is None:  # no assistant message in the window: only the stand-in matters
        return [EARLIER]
    return [EARLIER, *({"role": role, "content": orjson.loads(content)} for role, content in rows[j:])]


def window_start(role_at: Callable[[int], object], end: int, floor: int = 0) -> int | None:
    """Where the window of the messages before `end` (none before `floor`) starts: the last
    assistant group and the user messages after it. None when it holds no assistant message."""
    i = end
    while i > floor and role_at(i - 1) == "user":
        i -= 1
    j = i
    while j > floor and role_at(j - 1) == "assistant":
        j -= 1
    return None if i == j else j


def find_session(conn: Connection, tenant_id: int, client_id: str) -> Any:
    return conn.execute(select(S).where(S.c.tenant_id == tenant_id, S.c.client_id == client_id)).first()


def get_session(engine: Engine, tenant_id: int, client_id: str) -> Any:
    with read_tx(engine) as conn:
        return find_session(conn, tenant_id, client_id)


@dataclass(frozen=True, slots=True)
class Stored:
    """A session's last stored message."""

    session_pk: int
    role: str
    blocks: tuple[Block, ...]


def last_message(engine: Engine, tenant_id: int, client_id: str) -> Stored | None:
    """The session's last stored message, None before its first append."""
    # one statement, its own read snapshot: no transaction to begin and end
    rows = single_read(engine, _LAST_MESSAGE, {"tenant_id": tenant_id, "client_id": client_id})
    if not rows:
        return None
    pk, role, content = rows[0]
    return Stored(pk, role, tuple(orjson.loads(content)))


def get_session_by_pk(engine: Engine, session_pk: int) -> Any:
    with read_tx(engine) as conn:
        return conn.execute(select(S).where(S.c.id == session_pk)).first()


def set_activity(engine: Engine, tenant_id: int, client_id: str, state: str) -> Any:
    """Record the client's declared activity; returns the session row (None if unknown)."""
    with write_tx(engine) as conn:
        done = conn.execute(
            update(S).where(S.c.tenant_id == tenant_id, S.c.client_id == client_id).values(activity=state)
        ).rowcount
        return find_session(conn, tenant_id, client_id) if done else None


def session_info(engine: Engine, tenant_id: int, client_id: str) -> dict[str, Any] | None:
    """Metadata for GET /v1/sessions/{sid}."""
    with read_tx(engine) as conn:
        row = find_session(conn, tenant_id, client_id)
        if row is None:
            return None
        snap_tokens = conn.execute(
            select(SN.c.tokens)
            .where(SN.c.session_id == row.id)
            .order_by(SN.c.epoch.desc(), SN.c.through_seq.desc())
            .limit(1)
        ).scalar()
        files = conn.execute(select(func.count()).select_from(F).where(F.c.session_id == row.id)).scalar_one()
        memory = memory_store.count(conn, row.id)
        parent = None
        if row.parent_session_id is not None:
            parent = conn.execute(select(S.c.client_id).where(S.c.id == row.parent_session_id)).scalar()
    return {
        "session_id": row.client_id,
        "version": row.version,
        "epoch": row.epoch,
        "compacted_through": row.compacted_through,
        "activity": row.activity,
        "tokens": row.tokens,
        "snapshot_tokens": snap_tokens,
        "profile": {
            "model": row.model,
            "context_window": row.context_window,
            "output_reserve": row.output_reserve,
        },
        "counts": {"turns": row.version, "files": files, "memory_items": memory},
        "parent_session_id": parent,
        "parent_tool_use_id": row.parent_tool_use_id,
        "created_at": row.created_at.isoformat() + "Z",
        "last_append_at": row.last_append_at.isoformat() + "Z",
    }


def delete_session(engine: Engine, tenant_id: int, client_id: str) -> int | None:
    """Remove a session with its turns, snapshots, files and memory; returns its pk (None if unknown)."""
    with write_tx(engine) as conn:
        row = find_session(conn, tenant_id, client_id)
        if row is None:
            return None
        delete_session_rows(conn, row.id)
    return row.id


def delete_session_rows(conn: Connection, pk: int) -> None:
    """Everything of one session, the drop-in's responses that continue it included (a later
    previous_response_id naming one is then unknown: 400, never a request on a session gone)."""
    owner = conn.execute(select(S.c.tenant_id, S.c.client_id).where(S.c.id == pk)).first()
    if owner is not None:
        conn.execute(
            delete(PR).where(PR.c.tenant_id == owner.tenant_id, PR.c.session_client_id == owner.client_id)
        )
    file_ids = select(F.c.id).where(F.c.session_id == pk).scalar_subquery()
    conn.execute(delete(FR).where(FR.c.file_id.in_(file_ids)))
    for table in (F, TT, A, SN, SL):
        conn.execute(delete(table).where(table.c.session_id == pk))
    memory_store.delete_rows(conn, pk)
    conn.execute(update(S).where(S.c.parent_session_id == pk).values(parent_session_id=None))
    conn.execute(delete(S).where(S.c.id == pk))


def load_turns(conn: Connection, session_pk: int, after_seq: int = 0) -> list[Turn]:
    rows = conn.execute(
        select(TT.c.seq, TT.c.role, TT.c.content, TT.c.tokens)
        .where(TT.c.session_id == session_pk, TT.c.seq > after_seq)
        .order_by(TT.c.seq)
    ).all()
    return [Turn(r.seq, r.role, tuple(orjson.loads(r.content)), r.tokens) for r in rows]
