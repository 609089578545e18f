"""Tenants and their API keys: only a sha256 of each key is stored; keys are revoked or rotated, never edited."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from worker.store.db import read_tx, write_tx
from worker.store.tables import ApiKey, Tenant, utcnow

T = Tenant.__table__  # type: ignore[attr-defined]
K = ApiKey.__table__  # type: ignore[attr-defined]
PREFIX_CHARS = 12  # "cpd_" and 8 random characters: enough to tell keys apart, far too few to guess one


class TenantError(Exception):
    """Root of the tenant and key errors; the message is meant for the operator, in one line."""


class TenantExists(TenantError):
    """Raised when a tenant of that name already exists."""


class NoSuchTenant(TenantError):
    """Raised when no tenant has that name."""


class NoSuchKey(TenantError):
    """Raised when a revoke names a key id or prefix the tenant has no active key for."""


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What may be shown of a key: never the key, never its full hash."""

    key_id: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def state(self, now: datetime) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None:
            return "expired" if self.expires_at <= now else "expiring"
        return "active"


@dataclass(frozen=True, slots=True)
class KeyGrant:
    """An active key's tenant and, during a rotation's overlap, when it stops working."""

    tenant_id: int
    key_id: str
    expires_at: datetime | None


def new_key() -> str:
    return "cpd_" + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    # keys are 256 random bits: a plain sha256 is enough (no dictionary to attack)
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(digest: str) -> str:
    """The public id of a key: the start of its hash (a migrated key has no known prefix, but has this)."""
    return digest[:12]


def _add_key(conn: Connection, tenant_id: int, key: str) -> str:
    digest = hash_key(key)
    conn.execute(
        insert(K).values(
            tenant_id=tenant_id, key_hash=digest, key_id=key_id_of(digest), prefix=key[:PREFIX_CHARS]
        )
    )
    return key_id_of(digest)


def _tenant_id(conn: Connection, name: str) -> int:
    tid = conn.execute(select(T.c.id).where(T.c.name == name)).scalar()
    if tid is None:
        raise NoSuchTenant(f"no tenant named {name!r}")
    return int(tid)


def tenant_id_named(engine: Engine, name: str) -> int:
    """The tenant's id; NoSuchTenant when there is none by that name."""
    with read_tx(engine) as conn:
        return _tenant_id(conn, name)


def create_tenant(engine: Engine, name: str, key: str | None = None) -> tuple[int, str]:
    """A new tenant; returns its id and its API key (shown once, stored hashed)."""
    key = key or new_key()
    try:
        with write_tx(engine) as conn:
            if conn.execute(select(T.c.id).where(T.c.name == name)).first():
                raise TenantExists(f"a tenant named {name!r} already exists")
            tid = conn.execute(
                insert(T).values(name=name, api_key_hash=hash_key(key)).returning(T.c.id)
            ).scalar_one()
            _add_key(conn, tid, key)
    except IntegrityError:
        # a concurrent create of the same name won the race (or the key is already someone's)
        raise TenantExists(f"a tenant named {name!r} (or that key) already exists") from None
    return tid, key


def ensure_tenant(engine: Engine, name: str, key: str | None = None) -> str | None:
    """Create the tenant if missing; returns its key only when it was created now."""
    with read_tx(engine) as conn:
        if conn.execute(select(T.c.id).where(T.c.name == name)).first():
            return None
    try:
        return create_tenant(engine, name, key)[1]
    except TenantExists:
        return None


def rotate_key(engine: Engine, name: str, overlap: timedelta, now: datetime | None = None) -> str:
    """A new key for the tenant; its other active keys keep working for `overlap`, then are refused.

    A zero overlap ends them at once (what reset-key does). An earlier end already set is kept.
    """
    now = now or utcnow()
    end = now + overlap
    key = new_key()
    with write_tx(engine) as conn:
        tid = _tenant_id(conn, name)
        conn.execute(
            update(K)
            .where(K.c.tenant_id == tid, K.c.revoked_at.is_(None))
            .where(or_(K.c.expires_at.is_(None), K.c.expires_at > end))
            .values(expires_at=end)
        )
        _add_key(conn, tid, key)
    return key


def reset_key(engine: Engine, name: str) -> str | None:
    """A fresh key for an existing tenant (the old ones stop working now); None if no such tenant."""
    try:
        return rotate_key(engine, name, timedelta(0))
    except NoSuchTenant:
        return None


def revoke_keys(
    engine: Engine,
    name: str,
    *,
    key_id: str | None = None,
    prefix: str | None = None,
    now: datetime | None = None,
) -> list[str]:
    """Revoke the tenant's keys matching the id or prefix (every one when neither is given); their ids."""
    now = now or utcnow()
    with write_tx(engine) as conn:
        tid = _tenant_id(conn, name)
        which = and_(K.c.tenant_id == tid, K.c.revoked_at.is_(None))
        if key_id:
            which = and_(which, K.c.key_id == key_id)
        if prefix:
            which = and_(which, K.c.prefix == prefix)
        ids = list(conn.execute(select(K.c.key_id).where(which)).scalars())
        if (key_id or prefix) and not ids:
            raise NoSuchKey(f"tenant {name!r} has no unrevoked key {key_id or prefix!r}")
        conn.execute(update(K).where(which).values(revoked_at=now))
    return ids


def list_keys(engine: Engine, name: str) -> list[KeyInfo]:
    """The tenant's keys, oldest first: ids, prefixes and dates only."""
    with read_tx(engine) as conn:
        tid = _tenant_id(conn, name)
        rows = conn.execute(
            select(K.c.key_id, K.c.prefix, K.c.created_at, K.c.expires_at, K.c.revoked_at)
            .where(K.c.tenant_id == tid)
            .order_by(K.c.id)
        ).all()
    return [KeyInfo(*row) for row in rows]


def grant_for_digest(engine: Engine, digest: str, now: datetime | None = None) -> KeyGrant | None:
    """The grant of the key with this sha256, if it is neither revoked nor past its overlap."""
    now = now or utcnow()
    with read_tx(engine) as conn:
        row = conn.execute(
            select(K.c.tenant_id, K.c.key_id, K.c.expires_at).where(
                K.c.key_hash == digest,
                K.c.revoked_at.is_(None),
                or_(K.c.expires_at.is_(None), K.c.expires_at > now),
            )
        ).first()
    return None if row is None else KeyGrant(int(row[0]), row[1], row[2])


def tenant_for_key(engine: Engine, key: str) -> int | None:
    grant = grant_for_digest(engine, hash_key(key))
    return None if grant is None else grant.tenant_id
