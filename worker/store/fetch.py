"""The fetch path's SQL reads (worker/flows/serve.py): a function per query.

`tail_rows` is the hot one: the session row joined with its turns after a position, one query on a
DBAPI connection. Each row is (session pk, version, epoch, memory_version, context_window,
output_reserve, role, content, tokens, model, noted_memory_version, notes_restate); role is None
when the session has no turn past `after`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, and_, bindparam, select

from worker.store.db import single_read
from worker.store.sessions import TT, S

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
        S.c.model,
        S.c.noted_memory_version,
        S.c.notes_restate,
    )
    .select_from(S.outerjoin(TT, and_(TT.c.session_id == S.c.id, TT.c.seq > bindparam("after"))))
    .where(S.c.tenant_id == bindparam("tenant_id"), S.c.client_id == bindparam("client_id"))
    .order_by(TT.c.seq)
)
_PK = select(S.c.id).where(S.c.tenant_id == bindparam("tenant_id"), S.c.client_id == bindparam("client_id"))
_SYSTEM = select(S.c.system).where(S.c.id == bindparam("pk"))


def tail_rows(engine: Engine, tenant_id: int, client_id: str, after: int) -> Sequence[Any]:
    """The session row joined with its turns after `after`: one statement outside any transaction
    (single_read: SQLite, the thread's own connection; else a pooled one in autocommit).

    The hot path: SQLAlchemy's statement execution costs more than the query itself here.
    """
    return single_read(engine, _TAIL, {"after": after, "tenant_id": tenant_id, "client_id": client_id})


def tail_rows_in(conn: Connection, tenant_id: int, client_id: str, after: int) -> Sequence[Any]:
    """`tail_rows` inside a transaction, as named rows (row.context_window, ...)."""
    return conn.execute(_TAIL, {"tenant_id": tenant_id, "client_id": client_id, "after": after}).all()


def find_pk(conn: Connection, tenant_id: int, client_id: str) -> int | None:
    """The session's primary key, None when the tenant has no such session."""
    return conn.execute(_PK, {"tenant_id": tenant_id, "client_id": client_id}).scalar()


def system_of(conn: Connection, session_pk: int) -> str:
    """The session's system prompt as stored (NoResultFound when the row is gone)."""
    return conn.execute(_SYSTEM, {"pk": session_pk}).one().system
