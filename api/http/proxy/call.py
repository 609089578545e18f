"""One proxied call as the flow carries it, and its upstream: which client (the tenant's own
upstream or the deployment's), opening the call, the errors of an upstream that cannot be reached,
a side request passed through, and the streamed response that stops when the client goes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio
import httpx
import structlog
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from api.http.proxy.auth import ANTHROPIC, Auth
from api.http.proxy.errors import ProxyError
from api.http.proxy.formats import Format, StreamRelay
from api.http.threads import in_thread
from api.http.upstream import (
    Upstream,
    UpstreamResponse,
    forwarded_headers,
    open_stream,
    returned_headers,
    upstream_client,
)
from worker.flows.held_jobs import HeldJobs
from worker.flows.proxy import Proxied, Reconciled
from worker.proxy.conversations import Conversation
from worker.proxy.known_prefix import BodyRead
from worker.proxy.provider_keys import HeldKeys
from worker.resources import Resources
from worker.settings import shown_url

log = structlog.get_logger("compactd.proxy")


@dataclass
class Call:
    """One proxied request, as the flow carries it from reconcile to the recorded reply."""

    request: Request
    res: Resources
    tenant: int
    auth: Auth
    body: dict[str, Any]  # the client's body as it came (its format's)
    fmt: Format
    # the canonical body the use case takes (messages, system, model, max_tokens): the client's
    # body itself for the Messages API
    canonical: dict[str, Any] | None = None
    conversation: Conversation | None = None
    proxied: Proxied | None = None
    reconciled: Reconciled | None = None
    context_window: int | None = None
    upstream_raw: bytes = b""
    # the session the prompt was served from: its files and memory answer compactd's tools (a
    # history stored elsewhere after a failed commit, diverged, still refers to what was sent)
    session_id: str = ""
    # the whole answer once the client has it: recorded after the response (_record)
    answered: tuple[StreamRelay, list[list[dict[str, Any]]]] | None = None
    hidden: frozenset[str] = frozenset()
    # the compaction jobs its appends asked for, sent once the first event is relayed (HeldJobs)
    jobs: HeldJobs | None = None
    # the request's history being stored and its version noted in the prompt cache, beside the
    # upstream call (_settle_soon): waited for before the response's body (or error) goes out
    settling: asyncio.Future[bool] | None = None
    # the body as read (its known part from KnownPrefixes), kept there once its chains are known
    read: BodyRead | None = None
    # called with the relay once its reply is stored (previous_response_id)
    on_recorded: Callable[[StreamRelay], None] | None = None
    # the history's chains, when the edge knows them (a previous_response_id request, whose body
    # leaves out the history it continues)
    chains: list[str] | None = None
    recorded: bool = False  # the reply is stored (or was tried)
    upstream_url: str | None = None  # the tenant's own upstream, when it has one

    def headers(self) -> dict[str, str]:
        return forwarded_headers(self.request.headers, self.auth.provider, self.fmt.provider.name)

    @property
    def use_case_body(self) -> dict[str, Any]:
        return self.canonical if self.canonical is not None else self.body


async def upstream_of(call: Call) -> Upstream:
    """The client for the call's upstream: the tenant's own (`compactd tenant upstream`, read at
    most every 10 s), else the deployment's."""
    state, name = call.request.app.state, call.fmt.provider.name
    held: HeldKeys = state.tenant_upstreams[name]
    found, url = held.cached(call.tenant)
    if not found:
        url = await in_thread(held.get, call.tenant)
    if url is None:
        return state.upstreams[name]  # type: ignore[no-any-return]
    call.upstream_url = url
    if call.auth.source == "deployment":
        # the deployment's key is for the deployment's upstream: a tenant's own server gets the
        # tenant's held key or the client's own, never it
        call.auth = replace(call.auth, provider={}, source="none")
    pool: dict[str, Upstream] = state.upstream_pool
    if url not in pool:
        pool[url] = upstream_client(call.res.settings, url)
    return pool[url]


async def open_upstream(
    call: Call, body: bytes, path: str | None = None, method: str = "POST"
) -> UpstreamResponse:
    """The call's request opened on its upstream (`path`: the format's own unless given), its
    response's head in; a timeout is a 504, an upstream that cannot be reached a 502."""
    client = await upstream_of(call)
    try:
        return await open_stream(
            client, path or call.fmt.path, call.request.url.query, call.headers(), body, method
        )
    except httpx.TimeoutException:
        raise ProxyError(504, "the upstream did not answer in time") from None
    except httpx.HTTPError as exc:
        raise unreachable(call, exc) from None


def unreachable(call: Call, exc: Exception) -> ProxyError:
    """The 502 for an upstream that could not be reached, naming it (never its credentials), logged."""
    settings = call.res.settings
    anthropic = call.fmt.provider is ANTHROPIC
    url, name = (
        (settings.upstream_url, "COMPACTD_UPSTREAM_URL")
        if anthropic
        else (settings.openai_upstream_url, "COMPACTD_OPENAI_UPSTREAM_URL")
    )
    if call.upstream_url is not None:
        url, name = call.upstream_url, "the tenant's upstream"
    shown = shown_url(url)
    log.warning("proxy.upstream_unreachable", upstream=shown, error=type(exc).__name__)
    return ProxyError(502, f"the upstream {shown} ({name}) could not be reached")


async def upstream_error(response: UpstreamResponse) -> Response:
    """The upstream's error, status, headers and body, passed through unchanged."""
    try:
        data = await response.aread()
    finally:
        await response.aclose()
    return Response(data, status_code=response.status_code, headers=returned_headers(response.headers))


async def pass_through(call: Call, raw: bytes, path: str) -> Response:
    """A side request: the client's body goes upstream as is; the answer comes back as is."""
    response = await open_upstream(call, raw, path)
    if response.status_code != 200 or not call.body.get("stream"):
        return await upstream_error(response)
    failed = call.fmt.relay(call.body, frozenset()).error_event(
        call.fmt.error_payload(502, "the upstream connection failed mid-stream")
    )

    async def relayed() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            yield failed
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    return EventStream(relayed(), headers=returned_headers(response.headers), media_type="text/event-stream")


class EventStream(StreamingResponse):
    """A streamed response that stops (and so cancels the upstream call) as soon as the client
    disconnects, whatever the ASGI server's spec version: it listens for http.disconnect itself."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def stream() -> None:
                with contextlib.suppress(OSError):
                    await self.stream_response(send)
                group.cancel_scope.cancel()

            group.start_soon(stream)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()
        if self.background is not None:
            await self.background()
