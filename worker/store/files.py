"""Virtual files: offloaded payloads, clip originals, archives. zstd-compressed, content-addressed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zstandard
from sqlalchemy import Connection, Engine, func, insert, select

from worker.compaction.model import FileWrite
from worker.store.db import insert_ignore, read_tx, write_tx
from worker.store.tables import File, FileRead

F = File.__table__  # type: ignore[attr-defined]
FR = FileRead.__table__  # type: ignore[attr-defined]
_LEVEL = 6


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A virtual file the agent can read back, and which line ranges it has read so far."""

    ref: str
    kind: str
    lines: int
    read_ranges: tuple[str, ...] = ()


def compress(text: str) -> bytes:
    return zstandard.ZstdCompressor(level=_LEVEL).compress(text.encode())


def decompress(data: bytes) -> str:
    return zstandard.ZstdDecompressor().decompress(data).decode()


def save_files(engine: Engine, tenant_id: int, session_pk: int, files: Sequence[FileWrite]) -> int:
    """Persist files; a ref already stored is left alone (retries write the same keys)."""
    with write_tx(engine) as conn:
        return save_files_conn(conn, engine, tenant_id, session_pk, files)


def save_files_conn(
    conn: Connection, engine: Engine, tenant_id: int, session_pk: int, files: Sequence[Any]
) -> int:
    rows = [
        {
            "tenant_id": tenant_id,
            "session_id": session_pk,
            "ref": f.ref,
            "kind": f.kind,
            "media_type": f.media_type,
            "size_bytes": len(f.content.encode()),
            "lines": f.content.count("\n") + 1,
            "data": compress(f.content),
        }
        for f in {f.ref: f for f in files}.values()
    ]
    if not rows:
        return 0
    stmt = insert_ignore(engine)(F).on_conflict_do_nothing(index_elements=["tenant_id", "session_id", "ref"])
    # count what RETURNING gives back: drivers disagree on rowcount for ON CONFLICT DO NOTHING
    return sum(len(conn.execute(stmt.values(**row).returning(F.c.id)).all()) for row in rows)


def read_file(engine: Engine, session_pk: int, ref: str) -> tuple[int, str, str] | None:
    """(file id, kind, text) of a session's file, or None."""
    with read_tx(engine) as conn:
        row = conn.execute(
            select(F.c.id, F.c.kind, F.c.data).where(F.c.session_id == session_pk, F.c.ref == ref)
        ).first()
    return None if row is None else (row.id, row.kind, decompress(row.data))


def log_read(engine: Engine, file_id: int, session_pk: int, what: str) -> None:
    with write_tx(engine) as conn:
        conn.execute(insert(FR).values(file_id=file_id, session_id=session_pk, range=what))


def last_read_id(conn: Connection, session_pk: int) -> int:
    """The id of the session's newest logged read (0 if none): orders file lists by what they saw."""
    found = conn.execute(select(func.max(FR.c.id)).where(FR.c.session_id == session_pk)).scalar()
    return int(found or 0)


def file_infos(conn: Connection, session_pk: int) -> list[FileInfo]:
    """The session's files with what has been read of each (the inspector's list)."""
    rows = conn.execute(
        select(F.c.id, F.c.ref, F.c.kind, F.c.lines).where(F.c.session_id == session_pk).order_by(F.c.id)
    ).all()
    if not rows:
        return []
    reads: dict[int, list[str]] = {}
    for fid, what in conn.execute(
        select(FR.c.file_id, FR.c.range).where(FR.c.session_id == session_pk).order_by(FR.c.id)
    ):
        if what not in reads.setdefault(fid, []):
            reads[fid].append(what)
    return [FileInfo(r.ref, r.kind, r.lines, tuple(reads.get(r.id, ()))) for r in rows]
