"""The upstream Messages API (COMPACTD_UPSTREAM_URL): one httpx AsyncClient per API process, no retries.

compactd never retries a call that may have been billed: the client (Claude Code, the SDK) retries,
and sees the upstream's own status, headers and error body to decide how.
"""

from __future__ import annotations

from collections.abc import Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

from worker.settings import Settings

# request headers passed on as the client sent them (the auth headers are decided separately)
FORWARDED = (
    "anthropic-version",
    "anthropic-beta",
    "user-agent",
    "x-app",
    "anthropic-dangerous-direct-browser-access",
)
# response headers passed back: the provider's request id, rate-limit state and retry advice
RETURNED = ("request-id", "retry-after", "x-should-retry", "anthropic-organization-id", "content-type")
RETURNED_PREFIXES = ("anthropic-ratelimit-",)
AUTH_HEADERS = ("x-api-key", "authorization")


def upstream_client(settings: Settings) -> httpx.AsyncClient:
    """The client the app's lifespan opens and closes: timeouts from Settings, no retries, and a
    cookie jar that keeps nothing (one client serves every tenant: a cookie the upstream set in one
    caller's answer must never ride along on another caller's request)."""
    timeout = httpx.Timeout(
        connect=settings.upstream_connect_timeout_seconds,
        read=settings.upstream_read_timeout_seconds,
        write=settings.upstream_read_timeout_seconds,
        pool=settings.upstream_connect_timeout_seconds,
    )
    return httpx.AsyncClient(
        base_url=settings.upstream_url.rstrip("/"),
        timeout=timeout,
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
        transport=httpx.AsyncHTTPTransport(retries=0),
        cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),
    )


def forwarded_headers(client_headers: Mapping[str, str], provider_auth: Mapping[str, str]) -> dict[str, str]:
    """The upstream request's headers: the client's protocol headers, the provider's auth, JSON."""
    out = {k: client_headers[k] for k in FORWARDED if k in client_headers}
    out.setdefault("anthropic-version", "2023-06-01")
    out |= dict(provider_auth)
    out["content-type"] = "application/json"
    out["accept-encoding"] = "identity"  # bytes relayed as they come, never re-encoded
    return out


def returned_headers(upstream: httpx.Headers) -> dict[str, str]:
    return {
        k: v for k, v in upstream.items() if k.lower() in RETURNED or k.lower().startswith(RETURNED_PREFIXES)
    }


async def open_stream(
    client: httpx.AsyncClient, path: str, query: str, headers: Mapping[str, str], body: bytes
) -> httpx.Response:
    """Send the request and return once the response's status and headers are in (body unread);
    the caller closes it (aclose) — closing early cancels the upstream call."""
    url = path + (f"?{query}" if query else "")
    request = client.build_request("POST", url, content=body, headers=dict(headers))
    return await client.send(request, stream=True)


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error in the Anthropic shape: what an Anthropic client parses (docs/proxy.md)."""
    return {"type": "error", "error": {"type": kind, "message": message}}
