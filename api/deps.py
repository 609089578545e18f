"""Dependencies: the process's resources, the caller's tenant, the job sender."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from structlog.contextvars import bind_contextvars

from api.errors import Unauthorized
from worker.resources import Resources
from worker.store.tenants import hash_key, tenant_for_key

KEY_TTL_SECONDS = 30.0  # a reset key stops working everywhere within this


async def get_resources(request: Request) -> Resources:
    return request.app.state.resources


async def get_sender(request: Request) -> Any:
    return request.app.state.enqueue


async def get_tenant(request: Request) -> int:
    """The tenant of the bearer key; 401 problem when missing or unknown."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("send Authorization: Bearer <api key>")
    sid = request.path_params.get("sid")
    keys: dict[str, tuple[int, float]] = request.app.state.keys
    digest = hash_key(key.strip())
    hit = keys.get(digest)
    now = time.monotonic()
    if hit is not None and hit[1] > now:
        bind_contextvars(tenant_id=hit[0], session=sid)
        return hit[0]
    res: Resources = request.app.state.resources
    tenant = await run_in_threadpool(tenant_for_key, res.engine, key.strip())
    if tenant is None:
        raise Unauthorized("unknown API key")
    if len(keys) > 10_000:
        keys.clear()
    keys[digest] = (tenant, now + KEY_TTL_SECONDS)
    bind_contextvars(tenant_id=tenant, session=sid)
    return tenant


ResourcesDep = Annotated[Resources, Depends(get_resources)]
TenantDep = Annotated[int, Depends(get_tenant)]
SenderDep = Annotated[Any, Depends(get_sender)]
