"""Reads of one stored turn, outside a session's load (worker/store/sessions.py loads them in bulk)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, bindparam, select

from worker.store.db import read_tx
from worker.store.sessions import TT

_APPENDED_AT = select(TT.c.created_at).where(TT.c.session_id == bindparam("pk"), TT.c.seq == bindparam("seq"))


def appended_at(engine: Engine, session_pk: int, seq: int) -> datetime | None:
    """When the turn at `seq` was appended (naive UTC), None if it is gone (one indexed read)."""
    with read_tx(engine) as conn:
        return conn.execute(_APPENDED_AT, {"pk": session_pk, "seq": seq}).scalar()
