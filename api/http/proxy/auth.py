"""Who is calling a drop-in endpoint, and which provider key goes upstream (docs/proxy.md "Who is calling").

Either the client's API key is a compactd key and compactd sends the provider key it holds (the
tenant's own, sealed, else the deployment's), or the compactd key travels in `x-compactd-key` and
the client's own provider auth headers go upstream untouched (never logged, never stored).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fastapi import Request

from api.http.deps import Reads, authorize_key
from api.http.errors import ApiError, TooManyRequests
from api.http.proxy.errors import ProxyError
from api.http.threads import in_thread
from worker.flows.proxy import ProviderKeyUnreadable
from worker.proxy.provider_keys import HeldKeys
from worker.settings import Settings


@dataclass(frozen=True, slots=True)
class Provider:
    """One upstream API as auth sees it: the headers its clients authenticate with, how a held key
    is sent, and the deployment's key for it."""

    name: str  # "anthropic" | "openai"
    client_headers: tuple[str, ...]  # what a client's own auth travels in (passed through)

    def held_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key} if self.name == "anthropic" else {"authorization": f"Bearer {key}"}

    def deployment_key(self, settings: Settings) -> str | None:
        held = settings.upstream_api_key if self.name == "anthropic" else settings.openai_upstream_api_key
        return held.get_secret_value() if held is not None else None


ANTHROPIC = Provider("anthropic", ("x-api-key", "authorization"))
OPENAI = Provider("openai", ("authorization", "api-key", "openai-organization", "openai-project"))


@dataclass(frozen=True, slots=True)
class Auth:
    """The compactd key the caller presented and the auth headers the upstream gets."""

    key: str
    provider: dict[str, str]
    mode: str  # "custom_header": provider key passed through | "api_key": compactd holds it
    # whose provider key goes upstream: "client" (passed through), "tenant" (held for it),
    # "deployment" (COMPACTD_*UPSTREAM_API_KEY), "none"
    source: str = "client"


def resolve_auth(
    headers: Mapping[str, str], settings: Settings, provider: Provider = ANTHROPIC
) -> Auth | None:
    """`x-compactd-key` names the compactd key and the client's own auth headers go upstream
    untouched; otherwise the client's API key (x-api-key or Authorization: Bearer) is the compactd
    key and the upstream gets the deployment's provider key. None: no key at all."""
    named = headers.get("x-compactd-key", "").strip()
    if named:
        return Auth(named, {k: headers[k] for k in provider.client_headers if k in headers}, "custom_header")
    key = headers.get("x-api-key", "").strip() if provider is ANTHROPIC else ""
    if not key:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
    if not key:
        return None
    held = provider.deployment_key(settings)
    return Auth(key, provider.held_headers(held) if held else {}, "api_key", "deployment" if held else "none")


async def authenticate(
    request: Request, reads_for: Reads | None = None, provider: Provider = ANTHROPIC
) -> tuple[int, Auth, list[Any] | None]:
    """The caller's tenant and auth, and the replies to `reads_for(tenant)` read in the key check's
    Redis round trip (None: not read; deps.authorize_key)."""
    auth = resolve_auth(request.headers, request.app.state.resources.settings, provider)
    if auth is None:
        where = "x-api-key, Authorization: Bearer" if provider is ANTHROPIC else "Authorization: Bearer"
        raise ProxyError(401, f"send your compactd API key as {where}, or x-compactd-key")
    try:
        tenant, replies = await authorize_key(request, auth.key, reads_for)
    except TooManyRequests as exc:
        raise ProxyError(429, str(exc), {"retry-after": str(exc.extensions["retry_after_seconds"])}) from None
    except ApiError as exc:
        raise ProxyError(exc.status, exc.detail or exc.title) from None
    if auth.mode == "api_key":
        held: HeldKeys = request.app.state.provider_keys[provider.name]
        found, key = held.cached(tenant)
        try:
            key = key if found else await in_thread(held.get, tenant)
        except ProviderKeyUnreadable:
            raise ProxyError(
                500, "the provider key held for this tenant cannot be read; set it again"
            ) from None
        if key is not None:
            auth = replace(auth, provider=provider.held_headers(key), source="tenant")
    return tenant, auth, replies
