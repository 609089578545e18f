"""Reads of stored turns outside a session's load (worker/store/sessions.py loads them in bulk)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, select

from worker.store.db import read_tx
from worker.store.sessions import TT

_APPENDED_AT = select(TT.c.created_at).where(TT.c.session_id == bindparam("pk"), TT.c.seq == bindparam("seq"))


def appended_at(engine: Engine, session_pk: int, seq: int) -> datetime | None:
    """When the turn at `seq` was appended (naive UTC), None if it is gone (one indexed read)."""
    with read_tx(engine) as conn:
        return conn.execute(_APPENDED_AT, {"pk": session_pk, "seq": seq}).scalar()


def turns_page(engine: Engine, session_pk: int, after: int, limit: int) -> Sequence[Any]:
    """Up to `limit` stored turns (seq, role, content) after `seq` = after, in seq order."""
    with read_tx(engine) as conn:
        return conn.execute(
            select(TT.c.seq, TT.c.role, TT.c.content)
            .where(TT.c.session_id == session_pk, TT.c.seq > after)
            .order_by(TT.c.seq)
            .limit(limit)
        ).all()
