"""Reads for the inspector: a tenant's sessions page by page, and the plain rows worker/session_stats.py turns
into a session's statistics. Read-only; the numbers are computed by the pure module."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Engine, and_, func, or_, select

from worker.session_stats import (
    OFFLOADED,
    FileRow,
    Publish,
    TurnRow,
    count_redactions,
    produced_tokens,
    snapshot_kind,
)
from worker.store import memory as memory_store
from worker.store.db import read_tx
from worker.store.files import file_infos
from worker.store.sessions import SL, SN, TT, S, find_session


@dataclass(frozen=True, slots=True)
class SessionRows:
    """What the stats of one session are computed from."""

    session: Any
    turns: list[TurnRow]
    publishes: list[Publish]
    memory_items: int
    files: list[FileRow]
    redactions: dict[str, int]


def list_sessions(
    engine: Engine, tenant_id: int, limit: int, after: tuple[datetime, int] | None = None
) -> list[dict[str, Any]]:
    """The tenant's sessions, most recently active first (ties by newest pk), starting after the
    cursor (last_append_at, pk) of the previous page; each with its uncompacted tokens (offloaded
    blocks whole) and the published snapshot's tokens plus the turns since."""
    query = select(S.c.id, S.c.client_id, S.c.version, S.c.epoch, S.c.tokens, S.c.last_append_at).where(
        S.c.tenant_id == tenant_id
    )
    if after is not None:
        at, pk = after
        query = query.where(or_(S.c.last_append_at < at, and_(S.c.last_append_at == at, S.c.id < pk)))
    query = query.order_by(S.c.last_append_at.desc(), S.c.id.desc()).limit(limit)
    with read_tx(engine) as conn:
        rows = conn.execute(query).all()
        pks = [r.id for r in rows]
        tails: dict[int, int] = dict(
            conn.execute(
                select(TT.c.session_id, func.sum(TT.c.tokens))
                .join(S, S.c.id == TT.c.session_id)
                .where(TT.c.session_id.in_(pks), TT.c.seq > S.c.compacted_through)
                .group_by(TT.c.session_id)
            ).all()
        )
        # the uncompacted history counts each block offloaded at ingest whole: only the turns
        # holding an offload pointer are read
        offloaded: dict[int, int] = {}
        for sid, tokens, content in conn.execute(
            select(TT.c.session_id, TT.c.tokens, TT.c.content).where(
                TT.c.session_id.in_(pks), TT.c.content.contains(OFFLOADED, autoescape=True)
            )
        ):
            offloaded[sid] = offloaded.get(sid, 0) + produced_tokens(tokens, content) - tokens
        snaps: dict[int, int] = {}
        # at most KEEP_SNAPSHOTS per session: the last in this order is the published one
        for sid, tokens in conn.execute(
            select(SN.c.session_id, SN.c.tokens)
            .where(SN.c.session_id.in_(pks))
            .order_by(SN.c.epoch, SN.c.through_seq, SN.c.id)
        ):
            snaps[sid] = tokens
    return [
        {
            "pk": r.id,
            "id": r.client_id,
            "turns": r.version,
            "epoch": r.epoch,
            "raw_tokens": r.tokens + offloaded.get(r.id, 0),
            "served_tokens": snaps.get(r.id, 0) + int(tails.get(r.id) or 0),
            "last_activity": r.last_append_at,
        }
        for r in rows
    ]


def session_rows(engine: Engine, tenant_id: int, client_id: str) -> SessionRows | None:
    """The session's turns (tokens; content only to count redaction placeholders), its publish
    log, memory count and files; None when the tenant has no such session."""
    with read_tx(engine) as conn:
        row = find_session(conn, tenant_id, client_id)
        if row is None:
            return None
        turns: list[TurnRow] = []
        contents: list[str] = []
        for seq, role, tokens, content in conn.execute(
            select(TT.c.seq, TT.c.role, TT.c.tokens, TT.c.content)
            .where(TT.c.session_id == row.id)
            .order_by(TT.c.seq)
        ):
            turns.append(TurnRow(seq, role, tokens, produced_tokens(tokens, content)))
            contents.append(content)
        logged = [
            Publish(r.epoch, r.through_seq, r.tokens, r.kind)
            for r in conn.execute(
                select(SL.c.epoch, SL.c.through_seq, SL.c.tokens, SL.c.kind)
                .where(SL.c.session_id == row.id)
                .order_by(SL.c.id)
            )
        ]
        # snapshots published before the log existed still count (their kind from the report)
        seen = {(p.epoch, p.through_seq) for p in logged}
        for r in conn.execute(
            select(SN.c.epoch, SN.c.through_seq, SN.c.tokens, SN.c.report).where(SN.c.session_id == row.id)
        ):
            if (r.epoch, r.through_seq) not in seen:
                report = orjson.loads(r.report) if r.report else {}
                kind = snapshot_kind(str(report.get("decision", "")), str(report.get("switch", "")))
                logged.append(Publish(r.epoch, r.through_seq, r.tokens, kind))
        memory_items = memory_store.count(conn, row.id)
        files = [FileRow(f.ref, f.kind, f.lines, tuple(f.read_ranges)) for f in file_infos(conn, row.id)]
    return SessionRows(row, turns, logged, memory_items, files, count_redactions(contents))
