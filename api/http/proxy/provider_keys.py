"""PUT / GET / DELETE /v1/provider-key: the provider key compactd holds for the calling tenant.

`?provider=anthropic` (the default: POST /v1/messages) or `?provider=openai` (POST /v1/responses and
/v1/chat/completions). Sealed at rest (worker/proxy/provider_keys.py); only its public id is shown.
"""

from __future__ import annotations

from typing import Literal

import structlog
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from api.http.deps import TenantDep
from api.http.threads import in_thread
from worker.flows.proxy import set_provider_key
from worker.resources import Resources, redaction_key
from worker.store.proxy import provider_key_id

router = APIRouter(tags=["messages"])
log = structlog.get_logger("compactd.proxy")

ProviderName = Literal["anthropic", "openai"]
ProviderQuery = Query(default="anthropic", description="whose key: anthropic or openai")


class ProviderKeyIn(BaseModel):
    # printable ASCII, no spaces: what an HTTP header value carries
    api_key: str = Field(min_length=1, max_length=500, pattern=r"^[!-~]+$")


class ProviderKeyOut(BaseModel):
    key_id: str | None  # public id of the key compactd holds for the tenant; None: it holds none


@router.put("/v1/provider-key", include_in_schema=False)
async def put_provider_key(
    request: Request, tenant: TenantDep, body: ProviderKeyIn, provider: ProviderName = ProviderQuery
) -> ProviderKeyOut:
    """Hold this provider key for the calling tenant (sealed; docs/proxy.md "Who is calling")."""
    return ProviderKeyOut(key_id=await _set(request, tenant, provider, body.api_key))


@router.get("/v1/provider-key", include_in_schema=False)
async def get_provider_key(
    request: Request, tenant: TenantDep, provider: ProviderName = ProviderQuery
) -> ProviderKeyOut:
    """Whether compactd holds a provider key for the calling tenant: its public id, never the key."""
    res: Resources = request.app.state.resources
    return ProviderKeyOut(key_id=await in_thread(provider_key_id, res.engine, tenant, provider))


@router.delete("/v1/provider-key", include_in_schema=False, status_code=204)
async def delete_provider_key(
    request: Request, tenant: TenantDep, provider: ProviderName = ProviderQuery
) -> Response:
    """Stop holding a provider key for the calling tenant (the deployment's key applies again)."""
    await _set(request, tenant, provider, None)
    return Response(status_code=204)


async def _set(request: Request, tenant: int, provider: str, key: str | None) -> str | None:
    res: Resources = request.app.state.resources
    master = redaction_key(res.settings)
    kid = await in_thread(set_provider_key, res.engine, master, tenant, key, provider)
    request.app.state.provider_keys[provider].forget(tenant)
    event = "proxy.provider_key_set" if key else "proxy.provider_key_cleared"
    log.info(event, tenant_id=tenant, key_id=kid, provider=provider)
    return kid
