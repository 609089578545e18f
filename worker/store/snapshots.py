"""Snapshots: what the worker loads to compact, the version-guarded publish, and the sweep query."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, and_, delete, insert, or_, select, update

from worker.compaction.codec import transcript_from_json
from worker.compaction.epochs import extend
from worker.compaction.model import Transcript, Turn, canonical_json, content_hash
from worker.store.db import read_tx, write_tx
from worker.store.memory import BUDGET_TOKENS, load_items, render
from worker.store.sessions import SL, SN, TT, S, delete_session_rows, load_turns

KEEP_SNAPSHOTS = 2  # the published one and its predecessor (for inspection)


@dataclass(frozen=True, slots=True)
class Loaded:
    """A session as the worker sees it: its row, latest snapshot (or None), the tail, its memory
    (rendered now; the snapshot's state holds the block rendered at its epoch)."""

    session: Any
    snapshot: Any
    tail: list[Turn]
    memory: str
    # the stored hash of the last turn this load covers: a publish built on it must find it unchanged
    # (an append may rewrite that turn to redact a secret it cut in two: sessions._reseam)
    last_turn_hash: str = ""

    def state(self) -> Transcript:
        """The published snapshot's state (empty before the first publish)."""
        if self.snapshot is None:
            return Transcript(system=self.session.system, turns=())
        return transcript_from_json(orjson.loads(self.snapshot.state))

    def pinned(self, state: Transcript) -> tuple[str, int]:
        """The memory block the published prefix holds, and the memory version it renders: the one
        pinned at the epoch, none before the first snapshot (what the session's first prompts
        served: the changes are in the turns' memory notes), and the block as it is now once the
        system prompt changes (the prefix is rewritten from the top anyway)."""
        if self.snapshot is not None and state.system != self.session.system:
            return self.memory, self.session.memory_version
        if self.snapshot is None:
            return "", 0
        return state.memory, self.snapshot.pinned_memory_version

    def current(self, state: Transcript | None = None, memory: str | None = None) -> Transcript:
        """What is served now, as a transcript: the snapshot state, the tail, the session's
        system prompt and a memory block (default: rendered now)."""
        base = self.state() if state is None else state
        block = self.memory if memory is None else memory
        return replace(extend(base, self.tail), system=self.session.system, memory=block)


def latest_snapshot(conn: Connection, session_pk: int) -> Any:
    return conn.execute(
        select(SN)
        .where(SN.c.session_id == session_pk)
        .order_by(SN.c.epoch.desc(), SN.c.through_seq.desc())
        .limit(1)
    ).first()


def with_fresh_memory(engine: Engine, loaded: Loaded, memory_budget_tokens: int = BUDGET_TOKENS) -> Loaded:
    """loaded with its session row and memory read again (the observer just changed them); the
    snapshot and the turns stay those already loaded."""
    with read_tx(engine) as conn:
        session = conn.execute(select(S).where(S.c.id == loaded.session.id)).first()
        if session is None:
            return loaded
        memory = render(load_items(conn, session.id), memory_budget_tokens)
    return replace(loaded, session=session, memory=memory)


def load(engine: Engine, session_pk: int, memory_budget_tokens: int = BUDGET_TOKENS) -> Loaded | None:
    with read_tx(engine) as conn:
        session = conn.execute(select(S).where(S.c.id == session_pk)).first()
        if session is None:
            return None
        # read first: under READ COMMITTED each statement sees its own snapshot, and a rewrite
        # committed after this read makes the publish lose rather than pass with old text
        version_hash = turn_hash(conn, session_pk, session.version)
        snap = latest_snapshot(conn, session_pk)
        tail = load_turns(conn, session_pk, snap.through_seq if snap else 0)
        memory = render(load_items(conn, session_pk), memory_budget_tokens)
    if tail:  # the hash of the text this job compacts, not of what is stored by now
        last_hash = content_hash(canonical_json(list(tail[-1].content)))
    else:
        last_hash = version_hash if (snap.through_seq if snap else 0) == session.version else ""
    return Loaded(session, snap, tail, memory, last_hash)


def turn_hash(conn: Connection, session_pk: int, seq: int) -> str:
    """The stored content hash of one turn ("" when there is none)."""
    found = conn.execute(select(TT.c.content_hash).where(TT.c.session_id == session_pk, TT.c.seq == seq))
    return found.scalar() or ""


class _Rewritten(Exception):
    """The last turn a publish was built on changed since it was loaded."""


def publish(
    engine: Engine,
    session_pk: int,
    *,
    epoch: int,
    through_seq: int,
    tokens: int,
    memory_version: int,
    state: dict[str, Any],
    prompt: dict[str, Any],
    report: Any,
    pinned_memory_version: int | None = None,
    kind: str = "extend",
    last_turn_hash: str | None = None,
    noted_memory_version: int | None = None,
) -> bool:
    """Publish a snapshot unless a newer one is already there (compare-and-set on epoch, through, memory).

    A publish that wins is also logged (epoch, through, tokens, kind) for the inspector's history:
    only the newest KEEP_SNAPSHOTS snapshots are kept. With `last_turn_hash` (Loaded.last_turn_hash)
    it also loses when turn `through_seq` was rewritten since the load: the state holds its old
    text (half a secret that an append has since redacted). `noted_memory_version`: the memory
    version its prompt shows (after a summary or a fresh block), for the next memory note.

    Long on purpose (~75 lines, 15 of them the signature): the compare-and-set, the last-turn guard
    and the publish log are one transaction.
    """
    newer = or_(
        S.c.epoch < epoch,
        and_(S.c.epoch == epoch, S.c.compacted_through < through_seq),
        and_(
            S.c.epoch == epoch,
            S.c.compacted_through == through_seq,
            S.c.snapshot_memory_version < memory_version,
        ),
    )
    # serialized before the transaction: on SQLite its write lock stops every append (the proxy's
    # commit, before its upstream call) for as long as it is held (~1.2 MB of JSON at 150k tokens)
    rows = orjson.dumps(state).decode(), orjson.dumps(prompt).decode(), orjson.dumps(report).decode()
    try:
        with write_tx(engine) as conn:
            values: dict[str, Any] = {
                "epoch": epoch,
                "compacted_through": through_seq,
                "snapshot_memory_version": memory_version,
            }
            if noted_memory_version is not None:
                # the notes before the block (or in the turns a summary archived) are gone: the
                # next one says everything since, what was observed too
                values["noted_memory_version"] = noted_memory_version
                values["notes_restate"] = True
            won = conn.execute(update(S).where(S.c.id == session_pk, newer).values(**values)).rowcount
            if not won:
                return False
            # checked after the update: it waits for an append holding the session row to commit
            if last_turn_hash is not None and turn_hash(conn, session_pk, through_seq) != last_turn_hash:
                raise _Rewritten  # rolls the update back
            conn.execute(
                insert(SN).values(
                    session_id=session_pk,
                    epoch=epoch,
                    through_seq=through_seq,
                    tokens=tokens,
                    memory_version=memory_version,
                    pinned_memory_version=memory_version
                    if pinned_memory_version is None
                    else pinned_memory_version,
                    state=rows[0],
                    prompt=rows[1],
                    report=rows[2],
                )
            )
            conn.execute(
                insert(SL).values(
                    session_id=session_pk, epoch=epoch, through_seq=through_seq, tokens=tokens, kind=kind
                )
            )
            old = (
                select(SN.c.id)
                .where(SN.c.session_id == session_pk)
                .order_by(SN.c.epoch.desc(), SN.c.through_seq.desc(), SN.c.id.desc())
                .offset(KEEP_SNAPSHOTS)
            )
            stale = conn.execute(old).scalars().all()
            if stale:
                conn.execute(delete(SN).where(SN.c.id.in_(stale)))
    except _Rewritten:  # rolled back
        return False
    return True


def behind(engine: Engine, idle_before: datetime, limit: int = 1000) -> list[tuple[int, int, int]]:
    """(tenant id, session pk, version) of idle sessions whose snapshot misses turns or memory."""
    with read_tx(engine) as conn:
        rows = conn.execute(
            select(S.c.tenant_id, S.c.id, S.c.version)
            .where(
                or_(S.c.version > S.c.compacted_through, S.c.memory_version > S.c.snapshot_memory_version),
                S.c.last_append_at <= idle_before,
            )
            .order_by(S.c.last_append_at)
            .limit(limit)
        ).all()
    return [(r.tenant_id, r.id, r.version) for r in rows]


def cooled(
    engine: Engine, now: datetime, default_ttl_seconds: float, window_seconds: float, limit: int = 1000
) -> list[tuple[int, int, int]]:
    """(tenant id, session pk, version) of sessions whose provider cache expired within the last
    `window_seconds`: idle past their cache lifetime (their own, else the default), not much longer.
    One band of `last_append_at` per lifetime in use, so however many sessions were active earlier,
    the ones that just cooled are found."""
    with read_tx(engine) as conn:
        own = conn.execute(select(S.c.cache_ttl_seconds).where(S.c.cache_ttl_seconds.is_not(None)).distinct())
        out: list[tuple[int, int, int]] = []
        for ttl in [None, *own.scalars()]:
            seconds = ttl or default_ttl_seconds
            rows = conn.execute(
                select(S.c.tenant_id, S.c.id, S.c.version)
                .where(
                    S.c.cache_ttl_seconds.is_(None) if ttl is None else S.c.cache_ttl_seconds == ttl,
                    S.c.last_append_at <= now - timedelta(seconds=seconds),
                    S.c.last_append_at > now - timedelta(seconds=seconds + window_seconds),
                )
                .order_by(S.c.last_append_at)
                .limit(limit)
            ).all()
            out += [(r.tenant_id, r.id, r.version) for r in rows]
    return out


def summary_retry_due(engine: Engine, idle_before: datetime, limit: int = 1000) -> list[tuple[int, int, int]]:
    """(tenant id, session pk, version) of idle sessions whose published snapshot's summary failed
    transiently (jobs writes "summary_failed": "transient" into its report): to be tried again."""
    with read_tx(engine) as conn:
        rows = conn.execute(
            select(S.c.tenant_id, S.c.id, S.c.version)
            .join(
                SN,
                and_(
                    SN.c.session_id == S.c.id,
                    SN.c.epoch == S.c.epoch,
                    SN.c.through_seq == S.c.compacted_through,
                    SN.c.memory_version == S.c.snapshot_memory_version,
                ),
            )
            .where(SN.c.report.contains('"summary_failed":"transient"'), S.c.last_append_at <= idle_before)
            .order_by(S.c.last_append_at)
            .limit(limit)
        ).all()
    return [(r.tenant_id, r.id, r.version) for r in rows]


def expire(engine: Engine, inactive_before: datetime) -> list[int]:
    """Delete sessions with no append since `inactive_before`; returns their pks."""
    with write_tx(engine) as conn:
        pks = conn.execute(select(S.c.id).where(S.c.last_append_at < inactive_before)).scalars().all()
        for pk in pks:
            delete_session_rows(conn, pk)
    return list(pks)
