"""Proxied conversations: which session each lives in and how much of the client's history it covers.

A conversation has one record per session it lives in (worker/proxy/reconcile.py). A record moves
(or is made) only inside the append that stores the messages it describes (`claim`, run by
append_turns with the session row locked), so a session and its record never disagree, and two
requests racing on one branch cannot both append: the second one's plan is stale.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, insert, select, update

from worker.proxy.reconcile import Plan, Record
from worker.store.db import insert_ignore, raw_update, read_tx, write_tx
from worker.store.tables import ProviderKey, ProxyConversation, ProxyResponse, TenantUpstream, utcnow

P = ProxyConversation.__table__  # type: ignore[attr-defined]
K = ProviderKey.__table__  # type: ignore[attr-defined]
R = ProxyResponse.__table__  # type: ignore[attr-defined]
U = TenantUpstream.__table__  # type: ignore[attr-defined]


class StalePlan(Exception):
    """Raised when the conversation's record changed after the plan was made: plan again."""


class SessionTaken(Exception):
    """Raised when a plan that starts a session finds it already holds turns: another name."""


class SessionGone(Exception):
    """Raised when the record's session no longer exists (deleted): the history starts a new one."""


_RECORDS = (
    select(P.c.session_client_id, P.c.messages, P.c.chain)
    .where(P.c.tenant_id == bindparam("tenant_id"), P.c.key == bindparam("key"))
    .order_by(P.c.updated_at.desc(), P.c.id.desc())
)


def load_records(engine: Engine, tenant_id: int, key: str) -> list[Record]:
    """The conversation's branch records, the most recently moved first."""
    with read_tx(engine) as conn:
        rows = conn.execute(_RECORDS, {"tenant_id": tenant_id, "key": key}).all()
    return [Record(r.session_client_id, r.messages, r.chain) for r in rows]


def main_session(engine: Engine, tenant_id: int, prefix: str, other_than: str) -> str | None:
    """The session of the first conversation whose key starts with `prefix` (one client session's
    conversations), other than `other_than`: its most recently moved branch. None: there is none."""
    with read_tx(engine) as conn:
        first = conn.execute(
            select(P.c.key)
            .where(
                P.c.tenant_id == tenant_id, P.c.key.startswith(prefix, autoescape=True), P.c.key != other_than
            )
            .order_by(P.c.id)
            .limit(1)
        ).scalar()
        if first is None:
            return None
        return conn.execute(
            select(P.c.session_client_id)
            .where(P.c.tenant_id == tenant_id, P.c.key == first)
            .order_by(P.c.updated_at.desc(), P.c.id.desc())
            .limit(1)
        ).scalar()


# a record moved by every proxied append: built once, run on the DBAPI connection (raw_update)
_MOVE = (
    update(P)
    .where(
        P.c.tenant_id == bindparam("tenant_id"),
        P.c.key == bindparam("key"),
        P.c.session_client_id == bindparam("b_session"),
        P.c.messages == bindparam("b_messages"),
        P.c.chain == bindparam("b_chain"),
    )
    .values(
        session_client_id=bindparam("a_session"),
        messages=bindparam("a_messages"),
        chain=bindparam("a_chain"),
        updated_at=bindparam("a_at"),
    )
)


def claim(tenant_id: int, key: str, plan: Plan) -> Any:
    """append_turns' `locked` hook: move the record from plan.expected to plan.after, or raise."""

    def locked(conn: Connection, session: Any) -> None:
        if plan.fresh and session.version > 0:
            raise SessionTaken(plan.session_id)
        if not plan.fresh and session.version == 0:
            raise SessionGone(plan.session_id)
        after = plan.after
        if plan.expected is None:
            exists = conn.execute(
                select(P.c.id).where(
                    P.c.tenant_id == tenant_id, P.c.key == key, P.c.session_client_id == after.session_id
                )
            ).first()
            if exists is not None:
                raise StalePlan(key)
            conn.execute(
                insert(P).values(
                    tenant_id=tenant_id,
                    key=key,
                    session_client_id=after.session_id,
                    messages=after.messages,
                    chain=after.chain,
                    updated_at=utcnow(),
                )
            )
            return
        before = plan.expected
        moved = raw_update(
            conn,
            _MOVE,
            {
                "tenant_id": tenant_id,
                "key": key,
                "b_session": before.session_id,
                "b_messages": before.messages,
                "b_chain": before.chain,
                "a_session": after.session_id,
                "a_messages": after.messages,
                "a_chain": after.chain,
                "a_at": utcnow(),
            },
        )
        if moved != 1:
            raise StalePlan(key)

    return locked


def sealed_provider_key(engine: Engine, tenant_id: int, provider: str = "anthropic") -> str | None:
    """The tenant's sealed key for `provider` (worker/proxy/provider_keys.py), or None."""
    with read_tx(engine) as conn:
        return conn.execute(
            select(K.c.sealed).where(K.c.tenant_id == tenant_id, K.c.provider == provider)
        ).scalar()


def provider_key_id(engine: Engine, tenant_id: int, provider: str = "anthropic") -> str | None:
    """The public id of the tenant's key for `provider`, or None when it holds none."""
    with read_tx(engine) as conn:
        return conn.execute(
            select(K.c.key_id).where(K.c.tenant_id == tenant_id, K.c.provider == provider)
        ).scalar()


def store_provider_key(
    engine: Engine, tenant_id: int, sealed: str | None, key_id: str = "", provider: str = "anthropic"
) -> None:
    """Set (sealed) or clear (None) the tenant's key for `provider`."""
    with write_tx(engine) as conn:
        conn.execute(delete(K).where(K.c.tenant_id == tenant_id, K.c.provider == provider))
        if sealed is not None:
            conn.execute(
                insert(K).values(
                    tenant_id=tenant_id, provider=provider, sealed=sealed, key_id=key_id, updated_at=utcnow()
                )
            )


def save_response(engine: Engine, tenant_id: int, response_id: str, key: str, record: Record) -> None:
    """Remember where a response left its conversation (previous_response_id); a repeat is a no-op."""
    values = {
        "tenant_id": tenant_id,
        "response_id": response_id,
        "key": key,
        "session_client_id": record.session_id,
        "messages": record.messages,
        "chain": record.chain,
        "created_at": utcnow(),
    }
    with write_tx(engine) as conn:
        conn.execute(insert_ignore(engine)(R).values(**values).on_conflict_do_nothing())


def find_response(engine: Engine, tenant_id: int, response_id: str) -> tuple[str, Record] | None:
    """(conversation key, record) of a response this tenant was answered, or None."""
    with read_tx(engine) as conn:
        row = conn.execute(
            select(R.c.key, R.c.session_client_id, R.c.messages, R.c.chain).where(
                R.c.tenant_id == tenant_id, R.c.response_id == response_id
            )
        ).first()
    return None if row is None else (row.key, Record(row.session_client_id, row.messages, row.chain))


def tenant_upstream_url(engine: Engine, tenant_id: int, provider: str) -> str | None:
    """The upstream a tenant's calls to `provider` go to instead of the deployment's, or None."""
    with read_tx(engine) as conn:
        return conn.execute(
            select(U.c.url).where(U.c.tenant_id == tenant_id, U.c.provider == provider)
        ).scalar()


def store_tenant_upstream(engine: Engine, tenant_id: int, provider: str, url: str | None) -> None:
    """Set (or clear, None) the tenant's upstream for `provider`."""
    with write_tx(engine) as conn:
        conn.execute(delete(U).where(U.c.tenant_id == tenant_id, U.c.provider == provider))
        if url is not None:
            conn.execute(
                insert(U).values(tenant_id=tenant_id, provider=provider, url=url, updated_at=utcnow())
            )
