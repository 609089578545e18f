"""Session metadata, deletion and the client's declared activity."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel

from api.http.deps import ResourcesDep, SenderDep, TenantDep
from api.http.errors import InvalidCursor, NotFound
from api.http.routes.paths import SessionId
from api.http.schemas import (
    ActivityRequest,
    ActivityResponse,
    CompactRequest,
    CompactResponse,
    SessionInfo,
)
from worker.flows import serve as prompts
from worker.resources import Resources
from worker.session_stats import session_stats
from worker.store import inspector as stats_store
from worker.store import sessions
from worker.store.tables import utcnow

router = APIRouter(tags=["sessions"])

_EPOCH = datetime(1970, 1, 1)
_MICRO = timedelta(microseconds=1)


class SessionSummary(BaseModel):
    id: str
    turns: int
    epoch: int
    raw_tokens: int  # every turn as the agent produced it (offloaded blocks whole), uncompacted
    served_tokens: int  # a fetch's token_count now (the budget while the worker is behind)
    last_activity: str  # the last append, ISO 8601 UTC


class SessionPage(BaseModel):
    sessions: list[SessionSummary]
    next_cursor: str | None  # pass as ?cursor= for the next page; null on the last one


MAX_PK = 2**31 - 1  # ids are INTEGER: a larger pk cannot be one of ours (and PostgreSQL refuses it)


def encode_cursor(at: datetime, pk: int) -> str:
    """An opaque-looking but plain position: microseconds of the last append, then the pk."""
    return f"{(at - _EPOCH) // _MICRO}.{pk}"


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The position a cursor names; a 422 problem when it is out of range (not one we issued)."""
    micros, _, pk = cursor.partition(".")
    try:
        at = _EPOCH + int(micros) * _MICRO
    except OverflowError:
        raise InvalidCursor("cursor is not a next_cursor this API returned: pass it back unchanged") from None
    if int(pk) > MAX_PK:
        raise InvalidCursor("cursor is not a next_cursor this API returned: pass it back unchanged")
    return at, int(pk)


@router.get("/v1/sessions", response_model=SessionPage)
def list_sessions(
    res: ResourcesDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=200, description="sessions per page")] = 50,
    cursor: Annotated[
        str | None,
        Query(pattern=r"^[0-9]{1,18}\.[0-9]{1,18}$", description="next_cursor of the previous page"),
    ] = None,
) -> SessionPage:
    """The caller's tenant's sessions, most recently active first, a page at a time (keyset
    paging: a session appended to between pages moves to the front, never repeats on a later page
    it was already shown on unless it became active again)."""
    after = decode_cursor(cursor) if cursor else None
    rows = stats_store.list_sessions(res.engine, tenant, limit + 1, after)
    page, more = rows[:limit], len(rows) > limit
    return SessionPage(
        sessions=[
            SessionSummary(
                id=r["id"],
                turns=r["turns"],
                epoch=r["epoch"],
                raw_tokens=r["raw_tokens"],
                served_tokens=served_now(res, tenant, r["id"], r["served_tokens"]),
                last_activity=r["last_activity"].isoformat() + "Z",
            )
            for r in page
        ],
        next_cursor=encode_cursor(page[-1]["last_activity"], page[-1]["pk"]) if more else None,
    )


def served_now(res: Resources, tenant: int, sid: str, published: int) -> int:
    """What a fetch of the session serves now, `token_count`: snapshot, tail, memory and status
    note; past the budget (the worker behind) the budget, which the fallback a fetch then serves
    never passes. `published`, the snapshot plus the turns since, when there is no prompt to read."""
    served = prompts.fetch_ready(res.engine, res.cache, tenant, sid, res.policy_for)
    if served is None:
        return published
    return served.tokens if served.fits else served.budget_tokens


@router.get("/v1/sessions/{sid}/stats")
def get_stats(sid: SessionId, res: ResourcesDep, tenant: TenantDep) -> dict[str, Any]:
    """Per turn the served prompt's size, the compaction epochs (at which turn, structural or
    summary), the compaction ratio, working memory count, virtual files with what was read, and
    redactions by kind (counts only)."""
    rows = stats_store.session_rows(res.engine, tenant, sid)
    if rows is None:
        raise NotFound("no such session")
    policy = res.policy_for(rows.session.context_window, rows.session.output_reserve)
    # the figure a fetch's token_count says: the inspector shows one number for the served prompt
    served = prompts.fetch(res.engine, res.cache, tenant, sid, res.policy_for)
    return session_stats(
        sid,
        rows.turns,
        rows.publishes,
        budget_tokens=policy.budget_tokens,
        memory_items=rows.memory_items,
        files=rows.files,
        redactions=rows.redactions,
        served_tokens=served.tokens if served is not None else None,
    )


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
    return {
        **info,
        **res.cache.counters.session_stats(pk),
        "compact_request": res.cache.compact_requests.status(pk),
    }


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
