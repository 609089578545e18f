"""Tenants and their API keys (only a sha256 of each key is stored)."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import Engine, insert, select, update

from worker.store.db import read_tx, write_tx
from worker.store.tables import Tenant

T = Tenant.__table__  # type: ignore[attr-defined]


def new_key() -> str:
    return "cpd_" + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    # keys are 256 random bits: a plain sha256 is enough (no dictionary to attack)
    return hashlib.sha256(key.encode()).hexdigest()


def create_tenant(engine: Engine, name: str, key: str | None = None) -> tuple[int, str]:
    """A new tenant; returns its id and its API key (shown once, stored hashed)."""
    key = key or new_key()
    with write_tx(engine) as conn:
        tid = conn.execute(
            insert(T).values(name=name, api_key_hash=hash_key(key)).returning(T.c.id)
        ).scalar_one()
    return tid, key


def ensure_tenant(engine: Engine, name: str, key: str | None = None) -> str | None:
    """Create the tenant if missing; returns its key only when it was created now."""
    with read_tx(engine) as conn:
        if conn.execute(select(T.c.id).where(T.c.name == name)).first():
            return None
    return create_tenant(engine, name, key)[1]


def reset_key(engine: Engine, name: str) -> str | None:
    """A fresh key for an existing tenant (the old one stops working); None if no such tenant."""
    key = new_key()
    with write_tx(engine) as conn:
        done = conn.execute(update(T).where(T.c.name == name).values(api_key_hash=hash_key(key))).rowcount
    return key if done else None


def tenant_for_key(engine: Engine, key: str) -> int | None:
    with read_tx(engine) as conn:
        return conn.execute(select(T.c.id).where(T.c.api_key_hash == hash_key(key))).scalar()
