"""Working memory storage: the current entries and every change as a versioned event.

    load(engine, pk) -> [Item]                          the session's own items
    change(engine, pk, changes, origin=) -> (version, events)   one transaction, capped, recorded
    record_observed(engine, pk, groups, seen=, through=)        the observer's changes + watermark
    history / replay / diff                            the events, replayed to any version
    restore(engine, pk, event_id, origin=)             the value an event removed or replaced

A session's own rows have scope ''; shared rows (scope 'tenant' or 'key:<name>') belong to the
tenant (session_id 0) and carry the writing session in `written_by`. A session's prompt renders
its own items plus the tenant scope's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, func, insert, select, update

from worker.compaction.model import DEFAULT_POLICY
from worker.compaction.tokens import count_text
from worker.memory import model
from worker.memory.model import Change, Event, Item, MemoryOpError
from worker.settings import Settings
from worker.store.db import read_tx, write_tx
from worker.store.tables import MemoryEntry, MemoryEvent, Tenant, utcnow
from worker.store.tables import Session as SessionTable

M = MemoryEntry.__table__  # type: ignore[attr-defined]
E = MemoryEvent.__table__  # type: ignore[attr-defined]
S = SessionTable.__table__  # type: ignore[attr-defined]
T = Tenant.__table__  # type: ignore[attr-defined]

BUDGET_TOKENS: int = DEFAULT_POLICY.memory_budget_tokens
HARD_CAP_TOKENS: int = Settings.model_fields["memory_hard_cap_tokens"].default
TENANT = "tenant"


class MemoryOverCap(Exception):
    """Raised when a memory change would take the rendered memory past the hard cap."""

    def __init__(self, tokens: int, cap: int) -> None:
        super().__init__(
            f"working memory would be {tokens} tokens rendered; the hard cap is {cap}: "
            "remove or shorten items first"
        )
        self.tokens, self.cap = tokens, cap


class MemoryChanged(Exception):
    """Raised when items a caller planned from are no longer as it read them (nothing written)."""

    def __init__(self, moved: Sequence[tuple[str, str]]) -> None:
        super().__init__(f"changed since planned: {', '.join(f'{s}/{k}' for s, k in moved)}")
        self.moved = tuple(moved)


class EventNotFound(LookupError):
    """Raised when a restore names an event that is not in this session's (or scope's) history."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as stored: its id, the memory version it produced, when, and the item's seq/pin."""

    id: int
    version: int
    at: datetime
    event: Event
    source_seq: int | None = None
    pinned: bool = False
    written_by: int | None = None


@dataclass(frozen=True, slots=True)
class Diff:
    """Items present only in the later version, only in the earlier one, and changed (before, after)."""

    added: tuple[Item, ...]
    removed: tuple[Item, ...]
    changed: tuple[tuple[Item, Item], ...]


def valid_scope(scope: str) -> bool:
    """'' (the session's own), 'tenant', or 'key:<name>' with a name of 1-200 characters."""
    return scope in ("", TENANT) or (scope.startswith("key:") and 4 < len(scope) <= 204)


def _owner(session_pk: int, scope: str) -> int:
    return session_pk if scope == "" else 0


def _item(row: Any) -> Item:
    return Item(
        row.section,
        row.key,
        row.value,
        row.origin,
        row.source_seq,
        row.created_at,
        row.updated_at,
        row.referenced_at,
        row.status,
        bool(row.pinned),
    )


def _tenant_of(conn: Connection, session_pk: int, *, lock: bool = False) -> tuple[int, int]:
    query = select(S.c.tenant_id, S.c.memory_version).where(S.c.id == session_pk)
    row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        raise LookupError(f"no session {session_pk}")
    return row.tenant_id, row.memory_version


def _entries(conn: Connection, tenant_id: int, owner: int, scope: str) -> list[Item]:
    rows = conn.execute(
        select(M)
        .where(M.c.tenant_id == tenant_id, M.c.session_id == owner, M.c.scope == scope)
        .order_by(M.c.id)
    ).all()
    return [_item(r) for r in rows]


def load_items(conn: Connection, session_pk: int) -> list[Item]:
    """What the session's prompt renders: its own items, then the tenant scope's under other keys."""
    tenant_id, _ = _tenant_of(conn, session_pk)
    own = _entries(conn, tenant_id, session_pk, "")
    taken = {(i.section, i.key) for i in own}
    return own + [i for i in _entries(conn, tenant_id, 0, TENANT) if (i.section, i.key) not in taken]


def render(items: Sequence[Item], budget_tokens: int = BUDGET_TOKENS) -> str:
    """The pinned memory block (model.render): byte-stable for a given set of items."""
    return model.render(items, budget_tokens)


def load(engine: Engine, session_pk: int, *, scope: str = "") -> list[Item]:
    """The session's own items (or a shared scope's, seen from this session)."""
    with read_tx(engine) as conn:
        tenant_id, _ = _tenant_of(conn, session_pk)
        return _entries(conn, tenant_id, _owner(session_pk, scope), scope)


def version_of(engine: Engine, session_pk: int, *, scope: str = "") -> int:
    """The memory version: the session's memory_version, or a shared scope's newest event version."""
    with read_tx(engine) as conn:
        tenant_id, memory_version = _tenant_of(conn, session_pk)
        return memory_version if scope == "" else _scope_version(conn, tenant_id, scope)


def _scope_version(conn: Connection, tenant_id: int, scope: str) -> int:
    return conn.execute(
        select(func.coalesce(func.max(E.c.version), 0)).where(
            E.c.tenant_id == tenant_id, E.c.session_id == 0, E.c.scope == scope
        )
    ).scalar_one()


def change(
    engine: Engine,
    session_pk: int,
    changes: Sequence[Change],
    *,
    origin: str,
    reason: str = "",
    now: datetime | None = None,
    scope: str = "",
    hard_cap_tokens: int = HARD_CAP_TOKENS,
    expect: Sequence[Item] = (),
) -> tuple[int, tuple[Event, ...]]:
    """Apply `changes` all or nothing: entries written, one event row each, memory_version bumped.

    Raises MemoryOpError (nothing written) for an operation that cannot apply and MemoryOverCap
    when the rendered memory would grow past `hard_cap_tokens`. No-op changes write nothing.
    `expect`: items as the caller read them when it chose `changes` (the nightly prune); if any is
    not exactly so (or gone) in this transaction, MemoryChanged is raised and nothing written."""
    now = now or utcnow()
    with write_tx(engine) as conn:
        if scope:
            # writers to a shared scope serialize on the tenant row, taken before any session row
            # (a tenant write bumps every session of the tenant: the other order deadlocks), and
            # FOR NO KEY UPDATE: rows inserted meanwhile that reference the tenant need KEY SHARE
            tenant_id, _ = _tenant_of(conn, session_pk)
            conn.execute(select(T.c.id).where(T.c.id == tenant_id).with_for_update(key_share=True))
        tenant_id, memory_version = _tenant_of(conn, session_pk, lock=True)
        owner = _owner(session_pk, scope)
        before = _entries(conn, tenant_id, owner, scope)
        current = {(i.section, i.key): i for i in before}
        moved = [(i.section, i.key) for i in expect if current.get((i.section, i.key)) != i]
        if moved:
            raise MemoryChanged(moved)
        applied = model.apply(before, changes, origin=origin, now=now, reason=reason)
        ident = {"tenant_id": tenant_id, "session_id": owner, "scope": scope}
        if not applied.events:
            _write_references(conn, ident, before, applied.items)  # the same value again: still true
            return (memory_version if not scope else _scope_version(conn, tenant_id, scope)), ()
        old_tokens = count_text(model.render_lines(before))
        new_tokens = count_text(model.render_lines(applied.items))
        if new_tokens > hard_cap_tokens and new_tokens > old_tokens:
            raise MemoryOverCap(new_tokens, hard_cap_tokens)
        _write_entries(conn, ident, before, applied.items, session_pk)
        version = _bump(conn, tenant_id, session_pk, scope, memory_version)
        _write_events(conn, ident, version, now, before, applied, session_pk)
        return version, applied.events


def _write_entries(
    conn: Connection, ident: dict[str, Any], before: Sequence[Item], after: Sequence[Item], writer: int
) -> None:
    old = {(i.section, i.key): i for i in before}
    new = {(i.section, i.key): i for i in after}
    where = and_(*(getattr(M.c, k) == v for k, v in ident.items()))
    for section, key in old.keys() - new.keys():
        conn.execute(delete(M).where(where, M.c.section == section, M.c.key == key))
    for (section, key), item in new.items():
        if old.get((section, key)) == item:
            continue
        row = {
            "value": item.value,
            "origin": item.origin,
            "source_seq": item.source_seq,
            "status": item.status,
            "pinned": item.pinned,
            "tokens": model.item_tokens(item),
            "written_by": writer,
            "created_at": item.created_at,
            "updated_at": item.updated_at,
            "referenced_at": item.referenced_at,
        }
        if (section, key) in old:
            conn.execute(update(M).where(where, M.c.section == section, M.c.key == key).values(**row))
        else:
            conn.execute(insert(M).values(**ident, section=section, key=key, **row))


def _write_references(
    conn: Connection, ident: dict[str, Any], before: Sequence[Item], after: Sequence[Item]
) -> None:
    """Only referenced_at, of items a no-op change refreshed: no version, no event, same writer."""
    old = {(i.section, i.key): i.referenced_at for i in before}
    where = and_(*(getattr(M.c, k) == v for k, v in ident.items()))
    for item in after:
        if old.get((item.section, item.key), item.referenced_at) != item.referenced_at:
            conn.execute(
                update(M)
                .where(where, M.c.section == item.section, M.c.key == item.key)
                .values(referenced_at=item.referenced_at)
            )


def _bump(conn: Connection, tenant_id: int, session_pk: int, scope: str, memory_version: int) -> int:
    if scope == "":
        conn.execute(update(S).where(S.c.id == session_pk).values(memory_version=memory_version + 1))
        return memory_version + 1
    if scope == TENANT:
        # every session of the tenant renders this scope: each must notice
        conn.execute(
            update(S).where(S.c.tenant_id == tenant_id).values(memory_version=S.c.memory_version + 1)
        )
    return _scope_version(conn, tenant_id, scope) + 1


def _write_events(
    conn: Connection,
    ident: dict[str, Any],
    version: int,
    now: datetime,
    before: Sequence[Item],
    applied: model.Applied,
    writer: int,
) -> None:
    items = {(i.section, i.key): i for i in (*before, *applied.items)}
    final = {(i.section, i.key): i for i in applied.items}
    for ev in applied.events:
        # the item the event is about: the one it wrote, else the one it removed
        about = final.get((ev.section, ev.key)) if ev.after is not None else None
        about = about or items.get((ev.section, ev.key))
        conn.execute(
            insert(E).values(
                **ident,
                version=version,
                at=now,
                op=ev.op,
                section=ev.section,
                key=ev.key,
                before=ev.before,
                after=ev.after,
                status=ev.status,
                origin=ev.origin,
                reason=ev.reason,
                source_seq=about.source_seq if about else None,
                pinned=about.pinned if about else False,
                written_by=writer,
            )
        )


@dataclass(frozen=True, slots=True)
class Observed:
    """What recording observations did: the memory version, its events, the groups refused and why."""

    version: int
    events: tuple[Event, ...]
    refused: tuple[tuple[str, str], ...] = ()


def record_observed(
    engine: Engine,
    session_pk: int,
    groups: Sequence[tuple[str, Sequence[Change]]],
    *,
    seen: int,
    through: int,
    mentioned: Iterable[tuple[str, str]] = (),
    now: datetime | None = None,
    hard_cap_tokens: int = HARD_CAP_TOKENS,
) -> Observed | None:
    """Apply the observer's (reason, changes) groups and move the session's memory_observed_through
    from `seen` to `through` in one transaction: a crash loses neither without the other. None, with
    nothing written, when the watermark is no longer `seen` (another job observed those turns).

    Checked against the items read here, so an agent's write meanwhile wins: a change to an item of
    another origin is skipped (model.owned), and a group that cannot apply (MemoryOpError, past the
    hard cap) is refused alone. Items `mentioned` get referenced_at = `now` (no event)."""
    now = now or utcnow()
    with write_tx(engine) as conn:
        tenant_id, memory_version = _tenant_of(conn, session_pk, lock=True)
        if not _advance(conn, session_pk, seen, through):
            return None
        before = _entries(conn, tenant_id, session_pk, "")
        items, events, refused = apply_groups(before, groups, now, hard_cap_tokens)
        wanted = set(mentioned)
        items = tuple(replace(i, referenced_at=now) if (i.section, i.key) in wanted else i for i in items)
        ident = {"tenant_id": tenant_id, "session_id": session_pk, "scope": ""}
        _write_entries(conn, ident, before, items, session_pk)
        if not events:
            return Observed(memory_version, (), refused)
        version = _bump(conn, tenant_id, session_pk, "", memory_version)
        _write_events(conn, ident, version, now, before, model.Applied(items, events), session_pk)
        return Observed(version, events, refused)


def _advance(conn: Connection, session_pk: int, seen: int, through: int) -> bool:
    return bool(
        conn.execute(
            update(S)
            .where(S.c.id == session_pk, S.c.memory_observed_through == seen)
            .values(memory_observed_through=through)
        ).rowcount
    )


def apply_groups(
    before: Sequence[Item], groups: Sequence[tuple[str, Sequence[Change]]], now: datetime, cap: int
) -> tuple[tuple[Item, ...], tuple[Event, ...], tuple[tuple[str, str], ...]]:
    items: tuple[Item, ...] = tuple(before)
    events: list[Event] = []
    refused: list[tuple[str, str]] = []
    for reason, changes in groups:
        try:
            applied = _apply_observed(items, changes, now, reason, cap)
        except (MemoryOpError, MemoryOverCap) as exc:
            refused.append((reason, str(exc)))
            continue
        items = applied.items
        events.extend(applied.events)
    return items, tuple(events), tuple(refused)


def _apply_observed(
    items: Sequence[Item], changes: Sequence[Change], now: datetime, reason: str, cap: int
) -> model.Applied:
    applied = model.apply(
        items, model.owned(items, changes, "observed"), origin="observed", now=now, reason=reason
    )
    foreign = {(i.section, i.key) for i in items if i.origin != "observed"}
    if any((e.section, e.key) in foreign for e in applied.events):  # the files cap retiring one
        raise MemoryOpError("origin", "the change would remove an item the agent or user set")
    old_tokens = count_text(model.render_lines(items))
    new_tokens = count_text(model.render_lines(applied.items))
    if new_tokens > cap and new_tokens > old_tokens:
        raise MemoryOverCap(new_tokens, cap)
    return applied


def history(engine: Engine, session_pk: int, *, scope: str = "") -> list[Recorded]:
    """Every recorded event of the session's memory (or a shared scope), oldest first."""
    with read_tx(engine) as conn:
        tenant_id, _ = _tenant_of(conn, session_pk)
        return _events(conn, tenant_id, _owner(session_pk, scope), scope)


def _events(conn: Connection, tenant_id: int, owner: int, scope: str) -> list[Recorded]:
    rows = conn.execute(
        select(E)
        .where(E.c.tenant_id == tenant_id, E.c.session_id == owner, E.c.scope == scope)
        .order_by(E.c.id)
    ).all()
    return [_recorded(r) for r in rows]


def _recorded(r: Any) -> Recorded:
    event = Event(r.op, r.section, r.key, r.before, r.after, r.origin, r.reason, r.status)
    return Recorded(r.id, r.version, r.at, event, r.source_seq, bool(r.pinned), r.written_by)


def fold_events(records: Iterable[Recorded], through_version: int) -> list[Item]:
    """The items the events up to `through_version` leave, in the order they were created."""
    items: dict[tuple[str, str], Item] = {}
    for r in records:
        if r.version > through_version:
            break
        ev, ident = r.event, (r.event.section, r.event.key)
        if ev.after is None:
            items.pop(ident, None)
            continue
        old = items.get(ident)
        created = old.created_at if old is not None else r.at
        items[ident] = Item(
            ev.section, ev.key, ev.after, ev.origin, r.source_seq, created, r.at, r.at, ev.status, r.pinned
        )
    return list(items.values())


def changes_since(
    conn: Connection,
    session_pk: int,
    pinned_version: int,
    budget_tokens: int,
    since: str = "the block at the top",
    *,
    observed: bool = True,
) -> str:
    """A memory note's lines for what the session's own memory changed since `pinned_version`, the
    version its prompt already shows (the pinned block, or a memory note since): "" when nothing did.
    Without `observed`, nothing the worker observed from the turns (model.changes_note)."""
    tenant_id, version = _tenant_of(conn, session_pk)
    if version <= pinned_version:
        return ""
    events = _events(conn, tenant_id, session_pk, "")
    before = fold_events(events, pinned_version)
    pushed = model.pushed_out(r.event for r in events if r.version > pinned_version)
    current = _entries(conn, tenant_id, session_pk, "")
    return model.changes_note(before, current, budget_tokens, pushed, since, observed=observed)


def diff(engine: Engine, session_pk: int, a: int, b: int, *, scope: str = "") -> Diff:
    """What changed from version `a` to version `b` (either order)."""
    records = history(engine, session_pk, scope=scope)
    old = {(i.section, i.key): i for i in fold_events(records, a)}
    new = {(i.section, i.key): i for i in fold_events(records, b)}
    return Diff(
        added=tuple(i for k, i in new.items() if k not in old),
        removed=tuple(i for k, i in old.items() if k not in new),
        changed=tuple(
            (old[k], i)
            for k, i in new.items()
            if k in old and (old[k].value, old[k].status, old[k].pinned) != (i.value, i.status, i.pinned)
        ),
    )


def restore(
    engine: Engine,
    session_pk: int,
    event_id: int,
    *,
    origin: str,
    reason: str = "",
    scope: str = "",
    hard_cap_tokens: int = HARD_CAP_TOKENS,
) -> tuple[int, tuple[Event, ...]]:
    """Set the item an event removed (or replaced) back to the value it had before that event."""
    with read_tx(engine) as conn:
        tenant_id, _ = _tenant_of(conn, session_pk)
        row = conn.execute(
            select(E).where(
                E.c.id == event_id,
                E.c.tenant_id == tenant_id,
                E.c.session_id == _owner(session_pk, scope),
                E.c.scope == scope,
            )
        ).first()
    if row is None:
        raise EventNotFound(f"no memory event {event_id} in this history")
    if row.before is None:
        raise MemoryOpError("event", f"event {event_id} added an item: there is no earlier value to restore")
    restored = Change(
        "set", row.section, value=row.before, key=row.key, seq=row.source_seq, pinned=bool(row.pinned)
    )
    return change(
        engine,
        session_pk,
        [restored],
        origin=origin,
        reason=reason or f"restored from event {event_id}",
        scope=scope,
        hard_cap_tokens=hard_cap_tokens,
    )


def client_ids(engine: Engine, tenant_id: int, session_pks: Iterable[int]) -> dict[int, str]:
    """Session pk -> the client's session id: who wrote a shared item (this tenant's sessions only:
    a deleted writer's pk may be reused by another tenant's session)."""
    pks = list(session_pks)
    if not pks:
        return {}
    with read_tx(engine) as conn:
        rows = conn.execute(
            select(S.c.id, S.c.client_id).where(S.c.id.in_(pks), S.c.tenant_id == tenant_id)
        ).all()
        return {r.id: r.client_id for r in rows}


def count(conn: Connection, session_pk: int) -> int:
    """How many items the session's own memory holds."""
    return conn.execute(
        select(func.count()).select_from(M).where(M.c.session_id == session_pk, M.c.scope == "")
    ).scalar_one()


def delete_rows(conn: Connection, session_pk: int) -> None:
    """Remove a session's own entries and events (with the session itself)."""
    conn.execute(delete(M).where(M.c.session_id == session_pk, M.c.scope == ""))
    conn.execute(delete(E).where(E.c.session_id == session_pk, E.c.scope == ""))


def sessions_with_memory(engine: Engine) -> list[tuple[int, int, str]]:
    """(pk, tenant id, client id) of every session with memory of its own, by pk (nightly pruning)."""
    with read_tx(engine) as conn:
        owners = select(M.c.session_id).where(M.c.scope == "", M.c.session_id != 0)
        rows = conn.execute(
            select(S.c.id, S.c.tenant_id, S.c.client_id).where(S.c.id.in_(owners)).order_by(S.c.id)
        ).all()
    return [(r.id, r.tenant_id, r.client_id) for r in rows]


def orphaned_sessions(engine: Engine) -> list[int]:
    """Pks of sessions that are gone (deleted or expired) but whose memory rows remain."""
    with read_tx(engine) as conn:
        return _orphans(conn)


def _orphans(conn: Connection) -> list[int]:
    live = select(S.c.id)
    pks: set[int] = set()
    for table in (M, E):
        pks.update(
            conn.execute(
                select(table.c.session_id)
                .where(table.c.scope == "", table.c.session_id != 0, table.c.session_id.not_in(live))
                .distinct()
            ).scalars()
        )
    return sorted(pks)


def expire_orphans(engine: Engine) -> dict[int, int]:
    """Delete the memory (entries and events) of gone sessions; returns items deleted per session pk."""
    with write_tx(engine) as conn:
        gone = {pk: count(conn, pk) for pk in _orphans(conn)}
        for pk in gone:
            delete_rows(conn, pk)
    return gone
