"""Session metadata, deletion and the client's declared activity."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import ResourcesDep, SenderDep, TenantDep
from api.errors import NotFound
from api.routes.paths import SessionId
from api.schemas import ActivityRequest, ActivityResponse, SessionInfo
from worker.store import prompts, sessions

router = APIRouter(tags=["sessions"])


@router.get("/v1/sessions/{sid}", response_model=SessionInfo)
def get_session(sid: SessionId, res: ResourcesDep, tenant: TenantDep) -> dict:
    """Version, epoch, compacted_through, tokens, activity, profile and counts."""
    info = sessions.session_info(res.engine, tenant, sid)
    if info is None:
        raise NotFound("no such session")
    return info


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
