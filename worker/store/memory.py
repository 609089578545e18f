"""Working memory: keyed items rendered into every prompt; pruned to a token budget."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, select, update

from worker.compaction.tokens import count_text
from worker.store.db import insert_ignore, read_tx, write_tx
from worker.store.tables import MemoryItem, utcnow
from worker.store.tables import Session as SessionTable

M = MemoryItem.__table__  # type: ignore[attr-defined]
S = SessionTable.__table__  # type: ignore[attr-defined]


class MemoryOverCap(Exception):
    """Raised when a memory change would take the rendered memory past the hard cap."""

    def __init__(self, tokens: int, cap: int) -> None:
        super().__init__(f"working memory would be {tokens} tokens; the hard cap is {cap}")
        self.tokens, self.cap = tokens, cap


def render(items: Sequence[Any]) -> str:
    """`- key: value` lines, pinned first, then by key: byte-stable for a given set of items."""
    ordered = sorted(items, key=lambda i: (not i.pinned, i.key))
    return "\n".join(f"- {i.key}: {i.value}" for i in ordered)


def load_items(conn: Connection, session_pk: int) -> list[Any]:
    return list(
        conn.execute(
            select(M.c.key, M.c.value, M.c.pinned, M.c.tokens, M.c.updated_at)
            .where(M.c.session_id == session_pk)
            .order_by(M.c.key)
        ).all()
    )


def items(engine: Engine, session_pk: int) -> list[Any]:
    with read_tx(engine) as conn:
        return load_items(conn, session_pk)


def put_items(
    engine: Engine, session_pk: int, new: Sequence[tuple[str, str, bool]], *, hard_cap_tokens: int
) -> list[Any]:
    """Upsert (key, value, pinned) items; refuses past the hard cap. Bumps the session's memory_version."""
    now = utcnow()
    with write_tx(engine) as conn:
        current = {i.key: i for i in load_items(conn, session_pk)}
        merged = {k: (i.value, i.pinned) for k, i in current.items()}
        merged.update({k: (v, p) for k, v, p in new})
        total = count_text("\n".join(f"- {k}: {v}" for k, (v, _) in merged.items()))
        if total > hard_cap_tokens:
            raise MemoryOverCap(total, hard_cap_tokens)
        ins = insert_ignore(engine)(M)
        for key, value, pinned in new:
            row = {
                "value": value,
                "pinned": pinned,
                "tokens": count_text(f"- {key}: {value}"),
                "updated_at": now,
            }
            conn.execute(
                ins.values(session_id=session_pk, key=key, **row).on_conflict_do_update(
                    index_elements=["session_id", "key"], set_=row
                )
            )
        _bump(conn, session_pk)
        return load_items(conn, session_pk)


def delete_items(engine: Engine, session_pk: int, key: str | None = None) -> int:
    with write_tx(engine) as conn:
        query = delete(M).where(M.c.session_id == session_pk)
        if key is not None:
            query = query.where(M.c.key == key)
        n = conn.execute(query).rowcount
        if n:
            _bump(conn, session_pk)
        return n


def _bump(conn: Connection, session_pk: int) -> None:
    conn.execute(update(S).where(S.c.id == session_pk).values(memory_version=S.c.memory_version + 1))


def prune(engine: Engine, budget_tokens: int, *, older_than: datetime | None = None) -> int:
    """Drop unpinned items beyond the budget, oldest first, in every session; returns how many."""
    dropped = 0
    with write_tx(engine) as conn:
        session_pks = conn.execute(select(M.c.session_id).distinct()).scalars().all()
        for pk in session_pks:
            rows = conn.execute(
                select(M.c.id, M.c.pinned, M.c.tokens, M.c.updated_at)
                .where(M.c.session_id == pk)
                .order_by(M.c.updated_at, M.c.id)
            ).all()
            total = sum(r.tokens for r in rows)
            doomed = []
            for r in rows:
                if total <= budget_tokens:
                    break
                if r.pinned or (older_than is not None and r.updated_at > older_than):
                    continue
                doomed.append(r.id)
                total -= r.tokens
            if doomed:
                conn.execute(delete(M).where(M.c.id.in_(doomed)))
                _bump(conn, pk)
                dropped += len(doomed)
    return dropped
