"""Session metadata, deletion and the client's declared activity."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import ResourcesDep, SenderDep, TenantDep
from api.errors import NotFound
from api.routes.paths import SessionId
from api.schemas import ActivityRequest, ActivityResponse, CompactRequest, CompactResponse, SessionInfo
from worker.store import prompts, sessions
from worker.store.tables import utcnow

router = APIRouter(tags=["sessions"])


@router.get("/v1/sessions/{sid}", response_model=SessionInfo)
def get_session(sid: SessionId, res: ResourcesDep, tenant: TenantDep) -> dict:
    """Version, epoch, compacted_through, tokens, activity, profile, counts, per-session cache and
    summarizer stats, and the outcome of the latest /compact request."""
    info = sessions.session_info(res.engine, tenant, sid)
    if info is None:
        raise NotFound("no such session")
    pk = prompts.session_pk(res.engine, tenant, sid, res.cache)
    if pk is None:
        return info
    return {**info, **res.cache.session_stats(pk), "compact_request": res.cache.compact_requests.status(pk)}


@router.post("/v1/sessions/{sid}/compact", status_code=202, response_model=CompactResponse)
def post_compact(
    sid: SessionId,
    res: ResourcesDep,
    tenant: TenantDep,
    enqueue: SenderDep,
    body: CompactRequest | None = None,
) -> CompactResponse:
    """Ask for a summary now, optionally with focus instructions. It runs at the next quiet point
    (no tool call pending, client not busy); fetching is never blocked by it."""
    pk = prompts.session_pk(res.engine, tenant, sid, res.cache)
    info = sessions.session_info(res.engine, tenant, sid) if pk is not None else None
    if pk is None or info is None:
        raise NotFound("no such session")
    focus = res.redactor.redact_text(body.focus) if body and body.focus else ""
    res.cache.compact_requests.request(pk, focus, utcnow())
    enqueue(tenant, pk, info["version"])
    return CompactResponse(session_id=sid, status="queued", version=info["version"])


@router.delete("/v1/sessions/{sid}", status_code=204)
def delete_session(sid: SessionId, res: ResourcesDep, tenant: TenantDep) -> Response:
    """Remove the session with its turns, snapshots, files, memory and cache keys."""
    pk = sessions.delete_session(res.engine, tenant, sid)
    if pk is None:
        raise NotFound("no such session")
    prompts.forget(res.cache, tenant, sid)
    res.cache.drop(pk)
    return Response(status_code=204)


@router.put("/v1/sessions/{sid}/activity", response_model=ActivityResponse)
def put_activity(
    sid: SessionId, body: ActivityRequest, res: ResourcesDep, tenant: TenantDep, enqueue: SenderDep
) -> ActivityResponse:
    """Declare a tool action in flight (busy) or finished (idle); idle schedules a compaction."""
    row = sessions.set_activity(res.engine, tenant, sid, body.state.value)
    if row is None:
        raise NotFound("no such session")
    if body.state.value == "idle":
        enqueue(tenant, row.id, row.version)
    return ActivityResponse(session_id=sid, activity=body.state)
