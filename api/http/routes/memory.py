"""Working memory: /v1/sessions/{sid}/memory. Rendered into every prompt; survives every compaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from api.http.deps import ResourcesDep, SenderDep, TenantDep
from api.http.errors import InvalidMemoryOp, NotFound
from api.http.routes.paths import SessionId
from api.http.schemas import (
    DB_INT_MAX,
    MemoryChangedOut,
    MemoryDiffOut,
    MemoryEntryOut,
    MemoryEventOut,
    MemoryHistory,
    MemoryItemOut,
    MemoryPut,
    MemoryResponse,
    MemoryRestore,
    MemoryVersionOut,
)
from worker.compaction.tokens import count_text
from worker.contracts import MemoryPatch
from worker.flows.memory import redacted_change, redacted_item, republish
from worker.memory.model import SECTIONS, Change, Item, MemoryOpError, item_tokens, key_of
from worker.resources import Resources
from worker.store import memory, sessions
from worker.store.db import read_tx

router = APIRouter(tags=["memory"])
DELETED = "deleted by client"
ScopeQuery = Query(
    default="",
    max_length=204,
    description="'' (the session's own memory), 'tenant', or 'key:<name>' (shared with provenance)",
)


@dataclass(frozen=True, slots=True)
class Target:
    """What every memory route is given: the session named in the path, in the caller's tenant, at
    one scope, with the resources and the job sender. Nothing is read until `session()`."""

    res: Resources
    tenant: int
    sid: str
    scope: str
    enqueue: Any

    def session(self) -> Any:
        """The session row: 422 for an unknown scope, 404 when the tenant has no such session."""
        if not memory.valid_scope(self.scope):
            raise InvalidMemoryOp(
                "scope must be '', 'tenant' or 'key:<name>'", field="scope", loc=["query", "scope"]
            )
        row = sessions.get_session(self.res.engine, self.tenant, self.sid)
        if row is None:
            raise NotFound("no such session")
        return row


async def _target(
    sid: SessionId, res: ResourcesDep, tenant: TenantDep, enqueue: SenderDep, scope: str = ScopeQuery
) -> Target:
    # async and reading nothing: resolved inline, the session read stays in the route (after the
    # body is validated, as before)
    return Target(res, tenant, sid, scope, enqueue)


TargetDep = Annotated[Target, Depends(_target)]


def _stamp(at: Any) -> str:
    return at.isoformat() + "Z"


def _entry(i: Item) -> MemoryEntryOut:
    return MemoryEntryOut(
        section=i.section,
        key=i.key,
        value=i.value,
        origin=i.origin,
        source_seq=i.source_seq,
        status=i.status,
        pinned=i.pinned,
        tokens=item_tokens(i),
        created_at=_stamp(i.created_at),
        updated_at=_stamp(i.updated_at),
    )


def _response(t: Target, row: Any) -> MemoryResponse:
    res, scope = t.res, t.scope
    if scope:
        items, shown = memory.load(res.engine, row.id, scope=scope), None
    else:
        with read_tx(res.engine) as conn:
            # the session's own items, and what its prompt renders (its own plus the tenant scope)
            shown = memory.load_items(conn, row.id)
        items = memory.load(res.engine, row.id)
    rendered = memory.render(shown if shown is not None else items, res.settings.memory_budget_tokens)
    sections: dict[str, list[MemoryEntryOut]] = {s: [] for s in SECTIONS}
    for i in items:
        sections[i.section].append(_entry(i))
    notes = sorted((i for i in items if i.section == "notes"), key=lambda i: i.key)
    return MemoryResponse(
        session_id=t.sid,
        scope=scope,
        version=memory.version_of(res.engine, row.id, scope=scope),
        sections=sections,
        rendered=rendered,
        items=[
            MemoryItemOut(
                key=i.key,
                value=i.value,
                pinned=i.pinned,
                tokens=item_tokens(i),
                updated_at=_stamp(i.updated_at),
            )
            for i in notes
        ],
        tokens=count_text(rendered),
        budget_tokens=res.settings.memory_budget_tokens,
        hard_cap_tokens=res.settings.memory_hard_cap_tokens,
    )


def _change(
    t: Target, row: Any, changes: Sequence[Change], *, origin: str, reason: str, field_of: Any = None
) -> None:
    """Apply and republish; an operation that cannot apply is a 422 naming the request's field."""
    try:
        _, events = memory.change(
            t.res.engine,
            row.id,
            changes,
            origin=origin,
            reason=reason,
            scope=t.scope,
            hard_cap_tokens=t.res.settings.memory_hard_cap_tokens,
        )
    except MemoryOpError as exc:
        raise _op_problem(exc, field_of) from None
    if events:
        republish(t.res, t.tenant, t.sid, row, t.enqueue)


def _op_problem(exc: MemoryOpError, field_of: Any) -> InvalidMemoryOp:
    field, loc = field_of(exc) if field_of else (exc.field, ["body", exc.field])
    return InvalidMemoryOp(f"{field}: {exc}", field=field, loc=loc)


def _patch_field(exc: MemoryOpError) -> tuple[str, list[Any]]:
    if exc.index is None:
        return exc.field, ["body", exc.field]
    return f"ops[{exc.index}].{exc.field}", ["body", "ops", exc.index, exc.field]


@router.get("/v1/sessions/{sid}/memory", response_model=MemoryResponse)
def get_memory(t: TargetDep) -> MemoryResponse:
    """The session's working memory: every section's items, the rendered block, its version."""
    return _response(t, t.session())


@router.put("/v1/sessions/{sid}/memory", response_model=MemoryResponse)
def put_memory(t: TargetDep, body: MemoryPut) -> MemoryResponse:
    """Upsert `notes` items {key, value, pinned} (redacted like turns); 422 past memory_hard_cap_tokens."""
    row = t.session()
    changes = [
        Change("set", "notes", value, key=key, pinned=i.pinned)
        for i in body.items
        for key, value in [redacted_item(t.res.redactor, i.key, i.value)]
    ]
    _change(t, row, changes, origin="user", reason="")
    return _response(t, row)


@router.patch("/v1/sessions/{sid}/memory", response_model=MemoryResponse)
def patch_memory(t: TargetDep, body: MemoryPatch) -> MemoryResponse:
    """Apply small operations (set, add, remove, resolve) all or nothing: the update_working_memory tool's input."""
    row = t.session()
    changes = [redacted_change(t.res.redactor, op) for op in body.ops]
    reason = t.res.redactor.redact_text(body.reason)
    _change(t, row, changes, origin=body.origin, reason=reason, field_of=_patch_field)
    return _response(t, row)


@router.delete("/v1/sessions/{sid}/memory", response_model=MemoryResponse)
def delete_memory(
    t: TargetDep,
    key: str | None = Query(default=None, max_length=500),
    section: str = Query(default="notes", max_length=40),
    every: bool = Query(default=False, alias="all", description="required to delete every item"),
) -> MemoryResponse:
    """Delete one item (?key=, in ?section=, notes by default) or, with ?all=true, every item; recorded."""
    row = t.session()
    if section not in SECTIONS:
        raise InvalidMemoryOp(
            f"unknown section {section!r}; one of {', '.join(SECTIONS)}",
            field="section",
            loc=["query", "section"],
        )
    if key is None and not every:
        raise InvalidMemoryOp(
            "pass ?key=<key> to delete one item, or ?all=true to delete every item",
            field="all",
            loc=["query", "all"],
        )
    present = memory.load(t.res.engine, row.id, scope=t.scope)
    if key is None:
        doomed = present
    else:
        # items are stored under their redacted key, named as the block shows them (key_of)
        stored_key = key_of(Change("remove", section, key=t.res.redactor.redact_text(key)))
        doomed = [i for i in present if i.section == section and i.key == stored_key]
    changes = [Change("remove", i.section, key=i.key) for i in doomed]
    if changes:
        _change(t, row, changes, origin="user", reason=DELETED)
    return _response(t, row)


@router.get("/v1/sessions/{sid}/memory/history", response_model=MemoryHistory | MemoryDiffOut)
def get_history(
    t: TargetDep,
    from_version: int | None = Query(default=None, alias="from", ge=0, le=DB_INT_MAX),
    to_version: int | None = Query(default=None, alias="to", ge=0, le=DB_INT_MAX),
) -> MemoryHistory | MemoryDiffOut:
    """Every version with its events; with ?from=A&to=B the diff between the two versions."""
    res, sid, scope = t.res, t.sid, t.scope
    row = t.session()
    if (from_version is None) != (to_version is None):
        missing = "to" if to_version is None else "from"
        raise InvalidMemoryOp(
            f"pass both ?from= and ?to= for a diff ({missing} is missing)",
            field=missing,
            loc=["query", missing],
        )
    if from_version is not None and to_version is not None:
        d = memory.diff(res.engine, row.id, from_version, to_version, scope=scope)
        return MemoryDiffOut(
            session_id=sid,
            scope=scope,
            from_version=from_version,
            to_version=to_version,
            added=[_entry(i) for i in d.added],
            removed=[_entry(i) for i in d.removed],
            changed=[
                MemoryChangedOut(section=a.section, key=a.key, before=_entry(b), after=_entry(a))
                for b, a in d.changed
            ],
        )
    records = memory.history(res.engine, row.id, scope=scope)
    written = {r.written_by for r in records if r.written_by is not None}
    writers = memory.client_ids(res.engine, t.tenant, written) if scope else {}
    versions: dict[int, list[MemoryEventOut]] = {}
    for r in records:
        e = r.event
        versions.setdefault(r.version, []).append(
            MemoryEventOut(
                id=r.id,
                at=_stamp(r.at),
                op=e.op,
                section=e.section,
                key=e.key,
                before=e.before,
                after=e.after,
                status=e.status,
                origin=e.origin,
                reason=e.reason,
                written_by=writers.get(r.written_by) if r.written_by is not None else None,
            )
        )
    return MemoryHistory(
        session_id=sid,
        scope=scope,
        version=memory.version_of(res.engine, row.id, scope=scope),
        versions=[MemoryVersionOut(version=v, events=evs) for v, evs in versions.items()],
    )


@router.post("/v1/sessions/{sid}/memory/restore", response_model=MemoryResponse)
def restore_memory(t: TargetDep, body: MemoryRestore) -> MemoryResponse:
    """Put back the value an event removed (or replaced): every pruned or deleted item is recoverable."""
    row = t.session()
    try:
        _, events = memory.restore(
            t.res.engine,
            row.id,
            body.event,
            origin="user",
            scope=t.scope,
            hard_cap_tokens=t.res.settings.memory_hard_cap_tokens,
        )
    except memory.EventNotFound:
        raise NotFound(f"no memory event {body.event} in this session's history") from None
    except MemoryOpError as exc:
        raise InvalidMemoryOp(str(exc), field="event", loc=["body", "event"]) from None
    if events:
        republish(t.res, t.tenant, t.sid, row, t.enqueue)
    return _response(t, row)
