"""Dependencies: the process's resources, the caller's tenant, the job sender."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import Depends, Request
from structlog.contextvars import bind_contextvars

from api.http.errors import TooManyRequests, Unauthorized
from api.http.guard import Guard
from api.http.threads import in_thread
from worker.resources import Resources
from worker.store.tables import utcnow
from worker.store.tenants import KeyGrant, grant_for_digest, hash_key

KEY_CACHE_SIZE = 10_000
# a backstop only: revocations reach every process at once through the Redis stamp; this bounds a
# change the CLI could not announce (its Redis unreachable while the API processes' was not)
KEY_CACHE_SECONDS = 30.0


async def get_resources(request: Request) -> Resources:
    return request.app.state.resources


async def get_sender(request: Request) -> Any:
    return request.app.state.enqueue


def bearer_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("send Authorization: Bearer <api key>")
    return key.strip()


KeyCache = dict[str, tuple[KeyGrant, str, float]]


def cached_grant(keys: KeyCache, digest: str, stamp: str | None) -> KeyGrant | None:
    """The cached grant if it may still be served: the keys stamp unchanged since it was looked up
    (no revocation or rotation since, on any process), not past a rotation's overlap, and younger
    than KEY_CACHE_SECONDS. Without a stamp (Redis down) nothing is served from the cache."""
    hit = keys.get(digest)
    if hit is None or stamp is None or hit[1] != stamp or hit[2] < time.monotonic():
        return None
    grant = hit[0]
    if grant.expires_at is not None and grant.expires_at <= utcnow():
        return None
    return grant


async def get_tenant(request: Request) -> int:
    """The tenant of the bearer key: 401 problem when missing, unknown, revoked or expired; 429 past
    the key's rate limit."""
    tenant, _ = await authorize(request)
    return tenant


# the Redis commands a route sends along with the key check, given the tenant the key was last seen for
Reads = Callable[[int], Sequence[tuple[Any, ...]]]


async def authorize(request: Request, reads_for: Reads | None = None) -> tuple[int, list[Any] | None]:
    """get_tenant's check of the bearer key, and the replies to `reads_for(tenant)` read in the same
    Redis round trip."""
    return await authorize_key(request, bearer_key(request), reads_for)


async def authorize_key(
    request: Request, key: str, reads_for: Reads | None = None
) -> tuple[int, list[Any] | None]:
    """The tenant of `key`, and the replies to `reads_for(tenant)` read in the same round trip.

    The reads are chosen before the key is checked, for the tenant the process last saw the key
    for; their replies come back only when the check confirms that tenant (else None: read them
    again), so nothing is served on the strength of an unchecked key.
    """
    digest = hash_key(key)
    guard: Guard = request.app.state.guard
    keys: KeyCache = request.app.state.keys
    seen = keys.get(digest)
    reads = reads_for(seen[0].tenant_id) if reads_for is not None and seen is not None else ()
    # one Redis round trip on the event loop (0.25 s ceiling): cheaper than a thread hop
    verdict = await guard.check(digest, reads)
    grant = cached_grant(keys, digest, verdict.stamp)
    if grant is None:
        res: Resources = request.app.state.resources
        grant = await in_thread(grant_for_digest, res.engine, digest)
        if grant is None:
            keys.pop(digest, None)
            raise Unauthorized("unknown, revoked or expired API key")
        if verdict.stamp is not None:
            if len(keys) > KEY_CACHE_SIZE:
                keys.clear()
            keys[digest] = (grant, verdict.stamp, time.monotonic() + KEY_CACHE_SECONDS)
    bind_contextvars(tenant_id=grant.tenant_id, key_id=grant.key_id, session=request.path_params.get("sid"))
    if verdict.retry_after_ms > 0:
        raise TooManyRequests(
            "this API key is over its rate limit; retry after the Retry-After seconds",
            retry_after_seconds=max(1, math.ceil(verdict.retry_after_ms / 1000)),
        )
    confirmed = reads and seen is not None and seen[0].tenant_id == grant.tenant_id
    return grant.tenant_id, verdict.replies if confirmed else None


ResourcesDep = Annotated[Resources, Depends(get_resources)]
TenantDep = Annotated[int, Depends(get_tenant)]
SenderDep = Annotated[Any, Depends(get_sender)]
