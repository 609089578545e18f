"""The upstream Messages API (COMPACTD_UPSTREAM_URL): one client per API process, no retries.

compactd never retries a call that may have been billed: the client (Claude Code, the SDK) retries,
and sees the upstream's own status, headers and error body to decide how. The client is the small
HTTP/1.1 one (api/http/http1.py); httpx when the environment sends the upstream through a proxy
(HTTPS_PROXY, ALL_PROXY ...: httpx speaks to proxies, http1.py does not). Both raise httpx's errors.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from api.http.http1 import Http1Client
from worker.settings import Settings

# request headers passed on as the client sent them (the auth headers are decided separately)
FORWARDED = (
    "anthropic-version",
    "anthropic-beta",
    "user-agent",
    "x-app",
    "anthropic-dangerous-direct-browser-access",
)
# the same for OpenAI's API: its beta header and what Codex tells the provider of its session
OPENAI_FORWARDED = (
    "user-agent",
    "openai-beta",
    "originator",
    "session-id",
    "thread-id",
    "x-client-request-id",
)
OPENAI_FORWARDED_PREFIXES = ("x-codex-", "x-openai-", "x-stainless-")
# response headers passed back: the provider's request id, rate-limit state and retry advice
RETURNED = (
    "request-id",
    "x-request-id",
    "retry-after",
    "x-should-retry",
    "anthropic-organization-id",
    "openai-processing-ms",
    "content-type",
)
RETURNED_PREFIXES = ("anthropic-ratelimit-", "x-ratelimit-")
AUTH_HEADERS = ("x-api-key", "authorization")


class UpstreamResponse(Protocol):
    """What the edge reads of an upstream answer (httpx.Response and http1.Response alike)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


Upstream = Http1Client | httpx.AsyncClient


def upstream_client(settings: Settings, url: str | None = None) -> Upstream:
    """The client the app's lifespan opens and closes for one upstream (`url`, by default the
    Messages API's): timeouts from Settings, no retries, no cookies kept (one client serves every
    tenant: a cookie the upstream set in one caller's answer must never ride along on another
    caller's request)."""
    url = (url or settings.upstream_url).rstrip("/")
    if proxied(url):
        return httpx_client(settings, url)
    return Http1Client(url, settings.upstream_connect_timeout_seconds, settings.upstream_read_timeout_seconds)


def proxied(url: str) -> bool:
    """Whether the environment sends calls to `url` through a proxy (as httpx would read it)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    return bool(proxies.get(parts.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(
        parts.hostname or ""
    )


def httpx_client(settings: Settings, url: str | None = None) -> httpx.AsyncClient:
    """httpx for an upstream behind a proxy: the same timeouts, no retries, a jar that keeps nothing."""
    timeout = httpx.Timeout(
        connect=settings.upstream_connect_timeout_seconds,
        read=settings.upstream_read_timeout_seconds,
        write=settings.upstream_read_timeout_seconds,
        pool=settings.upstream_connect_timeout_seconds,
    )
    return httpx.AsyncClient(
        base_url=(url or settings.upstream_url).rstrip("/"),
        timeout=timeout,
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
        transport=httpx.AsyncHTTPTransport(retries=0),
        cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),
    )


def forwarded_headers(
    client_headers: Mapping[str, str], provider_auth: Mapping[str, str], provider: str = "anthropic"
) -> dict[str, str]:
    """The upstream request's headers: the client's protocol headers, the provider's auth, JSON."""
    if provider == "anthropic":
        out = {k: client_headers[k] for k in FORWARDED if k in client_headers}
        out.setdefault("anthropic-version", "2023-06-01")
    else:
        out = {
            k: v
            for k, v in client_headers.items()
            if k in OPENAI_FORWARDED or k.startswith(OPENAI_FORWARDED_PREFIXES)
        }
    out |= dict(provider_auth)
    out["content-type"] = "application/json"
    out["accept-encoding"] = "identity"  # bytes relayed as they come, never re-encoded
    return out


def returned_headers(upstream: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v for k, v in upstream.items() if k.lower() in RETURNED or k.lower().startswith(RETURNED_PREFIXES)
    }


async def open_stream(
    client: Upstream, path: str, query: str, headers: Mapping[str, str], body: bytes, method: str = "POST"
) -> UpstreamResponse:
    """Send the request and return once the response's status and headers are in (body unread);
    the caller closes it (aclose) — closing early cancels the upstream call. Raises httpx.HTTPError
    (httpx.TimeoutException for a timeout)."""
    url = path + (f"?{query}" if query else "")
    if isinstance(client, Http1Client):
        return await client.open(url, headers, body, method)
    request = client.build_request(method, url, content=body or None, headers=dict(headers))
    return await client.send(request, stream=True)


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error in the Anthropic shape: what an Anthropic client parses (docs/proxy.md)."""
    return {"type": "error", "error": {"type": kind, "message": message}}
