"""Working memory: /v1/sessions/{sid}/memory. Rendered into every prompt; survives every compaction."""

from __future__ import annotations

from fastapi import APIRouter, Query

from api.deps import ResourcesDep, SenderDep, TenantDep
from api.errors import NotFound
from api.routes.paths import SessionId
from api.schemas import MemoryItemOut, MemoryPut, MemoryResponse
from worker.redaction import Redactor
from worker.resources import Resources
from worker.store import memory, prompts, sessions

router = APIRouter(tags=["memory"])


def _session(res: Resources, tenant: int, sid: str) -> object:
    row = sessions.get_session(res.engine, tenant, sid)
    if row is None:
        raise NotFound("no such session")
    return row


def _response(res: Resources, sid: str, items: list) -> MemoryResponse:
    return MemoryResponse(
        session_id=sid,
        items=[
            MemoryItemOut(
                **{
                    "key": i.key,
                    "value": i.value,
                    "pinned": i.pinned,
                    "tokens": i.tokens,
                    "updated_at": i.updated_at.isoformat() + "Z",
                }
            )
            for i in items
        ],
        tokens=sum(i.tokens for i in items),
        budget_tokens=res.settings.memory_budget_tokens,
        hard_cap_tokens=res.settings.memory_hard_cap_tokens,
    )


@router.get("/v1/sessions/{sid}/memory", response_model=MemoryResponse)
def get_memory(sid: SessionId, res: ResourcesDep, tenant: TenantDep) -> MemoryResponse:
    """The session's working-memory items."""
    row = _session(res, tenant, sid)
    return _response(res, sid, memory.items(res.engine, row.id))  # type: ignore[attr-defined]


@router.put("/v1/sessions/{sid}/memory", response_model=MemoryResponse)
def put_memory(
    sid: SessionId, body: MemoryPut, res: ResourcesDep, tenant: TenantDep, enqueue: SenderDep
) -> MemoryResponse:
    """Upsert items (redacted like turns); 422 past memory_hard_cap_tokens."""
    row = _session(res, tenant, sid)
    new = [(*_redacted_item(res.redactor, i.key, i.value), i.pinned) for i in body.items]
    items = memory.put_items(res.engine, row.id, new, hard_cap_tokens=res.settings.memory_hard_cap_tokens)  # type: ignore[attr-defined]
    _republish(res, tenant, sid, row, enqueue)
    return _response(res, sid, items)


@router.delete("/v1/sessions/{sid}/memory", response_model=MemoryResponse)
def delete_memory(
    sid: SessionId,
    res: ResourcesDep,
    tenant: TenantDep,
    enqueue: SenderDep,
    key: str | None = Query(default=None, max_length=200),
) -> MemoryResponse:
    """Delete one item (?key=) or all of them."""
    row = _session(res, tenant, sid)
    # items are stored under their redacted key: look the key up the same way
    stored_key = res.redactor.redact_text(key) if key is not None else None
    memory.delete_items(res.engine, row.id, stored_key)  # type: ignore[attr-defined]
    _republish(res, tenant, sid, row, enqueue)
    return _response(res, sid, memory.items(res.engine, row.id))  # type: ignore[attr-defined]


def _redacted_item(redactor: Redactor, key: str, value: str) -> tuple[str, str]:
    """(key, value) redacted like a tool argument: both scanned, the value also judged by its key."""
    ((red_key, red_value),) = redactor.redact_value({key: value}).items()
    return red_key, red_value


def _republish(res: Resources, tenant: int, sid: str, row: object, enqueue: object) -> None:
    # the cached prompt now has old memory: fetches assemble from the DB until the worker republishes
    res.cache.invalidate(row.id)  # type: ignore[attr-defined]
    prompts.forget(res.cache, tenant, sid)
    enqueue(tenant, row.id, row.version)  # type: ignore[attr-defined,operator]
