"""GET /v1/sessions/{sid}/prompt: the ready prompt, from stored bytes; never waits for compaction."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from api.deps import ResourcesDep, TenantDep
from api.errors import NotFound
from api.routes.paths import SessionId
from api.schemas import PromptResponse
from worker.store.db import is_sqlite
from worker.store.prompts import fetch

router = APIRouter(tags=["prompt"])


@router.get(
    "/v1/sessions/{sid}/prompt",
    response_class=Response,
    responses={200: {"model": PromptResponse, "content": {"application/json": {}}}},
)
async def get_prompt(sid: SessionId, request: Request, res: ResourcesDep, tenant: TenantDep) -> Response:
    """{system, messages} ready for anthropic.messages.create, with every appended turn in it."""
    if is_sqlite(res.engine):
        # a local file read plus one Redis round trip with a 0.25 s ceiling: cheaper inline than a thread hop
        served = fetch(res.engine, res.cache, tenant, sid, res.policy_for)
    else:
        served = await run_in_threadpool(fetch, res.engine, res.cache, tenant, sid, res.policy_for)
    if served is None:
        raise NotFound("no such session")
    request.app.state.metrics.fetches.labels(served.source).inc()
    return Response(served.body, media_type="application/json")
