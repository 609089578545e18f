"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API, with compactd inside.

A thin edge (docs/proxy.md): who is calling (auth) -> which conversation -> reconcile and serve
(worker/flows/proxy.py, the prompt fetch) -> the upstream call streamed back as it arrives
(worker/proxy/sse.py), compactd's own tool calls answered in between -> the reply recorded.
Errors are in the Anthropic shape, since the callers are Anthropic clients.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio
import httpx
import orjson
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.background import BackgroundTask
from starlette.types import Receive, Scope, Send

from api.http.deps import Reads, TenantDep, authorize_key
from api.http.error_shapes import anthropic_type
from api.http.errors import ApiError, NotFound, TooManyRequests
from api.http.guard import Guard
from api.http.jobs import note_command
from api.http.replies import ReplyGrace, may_wait
from api.http.routes.prompt import count_served, serve_prompt
from api.http.threads import in_background, in_thread
from api.http.upstream import (
    AUTH_HEADERS,
    Upstream,
    UpstreamResponse,
    error_body,
    forwarded_headers,
    open_stream,
    returned_headers,
)
from worker.compaction.assemble import merge_roles
from worker.compaction.errors import InvalidTranscript
from worker.compaction.tools import tool_definitions
from worker.flows import proxy_tools
from worker.flows.append import BrokenConversation
from worker.flows.held_jobs import HeldJobs
from worker.flows.proxy import (
    Ahead,
    Prefetched,
    ProviderKeyUnreadable,
    Proxied,
    Reconciled,
    Unreconciled,
    reconcile,
    reconcile_ahead,
    record_reply,
    set_provider_key,
    settle,
)
from worker.memory.tool import memory_tool_definitions
from worker.proxy import fingerprints
from worker.proxy.conversations import SESSION_ID, Conversation, identify, is_side_request
from worker.proxy.known_prefix import BodyRead, KnownPrefixes
from worker.proxy.outbound import build_upstream, upstream_bytes
from worker.proxy.provider_keys import HeldKeys
from worker.proxy.reconcile import plan
from worker.proxy.sse import EventSplitter, Relay, encode_event
from worker.resources import Resources, redaction_key
from worker.settings import Settings, shown_url
from worker.store.proxy import load_records, provider_key_id
from worker.store.sessions import Appended
from worker.store.tenants import hash_key

router = APIRouter(tags=["messages"])
log = structlog.get_logger("compactd.proxy")


def anthropic_error(
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
    details: Mapping[str, str] | None = None,
) -> Response:
    body = error_body(anthropic_type(status), message)
    if details:
        body["error"]["details"] = dict(details)
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


class ProxyError(Exception):
    """Raised inside the edge to answer with an Anthropic-shaped error."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.headers, self.details = status, message, headers, details


# A request on a message thread (`thread: {"type": "create" | "continue", ...}`, beta
# message-threads-2026-08-12) asks the server to keep the conversation itself and takes only the
# new messages. compactd keeps it, compacted, from the whole history each request carries: it
# answers as a server without threads does, and Claude Code then resends the turn whole and stops
# threading on that model for the session (error_code `thread_unsupported_request`; the
# `capability_rejected:` token is what other clients match; docs/proxy.md "Message threads").
THREADS_UNSUPPORTED = (
    "capability_rejected: beta_header:message-threads-2026-08-12; compactd keeps the conversation"
    " itself, compacted. Resend this turn with the full message history and no `thread`."
)
THREADS_DETAILS = {"error_code": "thread_unsupported_request"}


@dataclass(frozen=True, slots=True)
class Auth:
    """The compactd key the caller presented and the auth headers the upstream gets."""

    key: str
    provider: dict[str, str]
    mode: str  # "custom_header": provider key passed through | "api_key": compactd holds it


def resolve_auth(headers: Mapping[str, str], settings: Settings) -> Auth | None:
    """`x-compactd-key` names the compactd key and the client's own auth headers go upstream
    untouched; otherwise the client's API key (x-api-key or Authorization: Bearer) is the compactd
    key and the upstream gets COMPACTD_UPSTREAM_API_KEY. None: no key at all."""
    named = headers.get("x-compactd-key", "").strip()
    if named:
        return Auth(named, {k: headers[k] for k in AUTH_HEADERS if k in headers}, "custom_header")
    key = headers.get("x-api-key", "").strip()
    if not key:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
    if not key:
        return None
    held = settings.upstream_api_key
    return Auth(key, {"x-api-key": held.get_secret_value()} if held else {}, "api_key")


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProxyError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ProxyError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ProxyError(400, "messages: a non-empty list of message objects is required")
    return body


def window_header(headers: Mapping[str, str]) -> int | None:
    value = headers.get("x-compactd-context-window")
    if value is None:
        return None
    if not value.isdigit() or not 1_000 <= int(value) <= 10_000_000:
        raise ProxyError(400, "x-compactd-context-window: an integer from 1000 to 10000000")
    return int(value)


def session_header(headers: Mapping[str, str]) -> str | None:
    value = headers.get("x-compactd-session")
    if value is not None and not SESSION_ID.match(value):
        raise ProxyError(400, "x-compactd-session: 1-200 characters of A-Z a-z 0-9 . _ : @ -")
    return value


async def authenticate(
    request: Request, reads_for: Reads | None = None
) -> tuple[int, Auth, list[Any] | None]:
    """The caller's tenant and auth, and the replies to `reads_for(tenant)` read in the key check's
    Redis round trip (None: not read; deps.authorize_key)."""
    auth = resolve_auth(request.headers, request.app.state.resources.settings)
    if auth is None:
        raise ProxyError(
            401, "send your compactd API key as x-api-key, Authorization: Bearer, or x-compactd-key"
        )
    try:
        tenant, replies = await authorize_key(request, auth.key, reads_for)
    except TooManyRequests as exc:
        raise ProxyError(429, str(exc), {"retry-after": str(exc.extensions["retry_after_seconds"])}) from None
    except ApiError as exc:
        raise ProxyError(exc.status, exc.detail or exc.title) from None
    if auth.mode == "api_key":
        held: HeldKeys = request.app.state.provider_keys
        found, key = held.cached(tenant)
        try:
            key = key if found else await in_thread(held.get, tenant)
        except ProviderKeyUnreadable:
            raise ProxyError(
                500, "the provider key held for this tenant cannot be read; set it again"
            ) from None
        if key is not None:
            auth = replace(auth, provider={"x-api-key": key})
    return tenant, auth, replies


@dataclass
class Call:
    """One proxied request, as the edge carries it from reconcile to the recorded reply."""

    request: Request
    res: Resources
    tenant: int
    auth: Auth
    body: dict[str, Any]
    conversation: Conversation | None = None
    proxied: Proxied | None = None
    reconciled: Reconciled | None = None
    context_window: int | None = None
    upstream_raw: bytes = b""
    # the session the prompt was served from: its files and memory answer compactd's tools (a
    # history stored elsewhere after a failed commit, diverged, still refers to what was sent)
    session_id: str = ""
    # the whole answer once the client has it: recorded after the response (_record)
    answered: tuple[Relay, list[list[dict[str, Any]]]] | None = None
    hidden: frozenset[str] = frozenset()
    # the compaction jobs its appends asked for, sent once the first event is relayed (HeldJobs)
    jobs: HeldJobs | None = None
    # the request's history being stored and its version noted in the prompt cache, beside the
    # upstream call (_settle_soon): waited for before the response's body (or error) goes out
    settling: asyncio.Future[bool] | None = None
    # the body as read (its known part from KnownPrefixes), kept there once its chains are known
    read: BodyRead | None = None

    def headers(self) -> dict[str, str]:
        return forwarded_headers(self.request.headers, self.auth.provider)


@router.post("/v1/messages", include_in_schema=False)
async def create_message(request: Request) -> Response:
    """The Messages API (streaming or not) through compactd; `?beta=true` accepted."""
    return await _answered(_create(request))


@router.post("/v1/messages/count_tokens", include_in_schema=False)
async def count_tokens(request: Request) -> Response:
    """Token count of the request as compactd would send it (its compacted history), from the upstream."""
    return await _answered(_count(request))


async def _answered(work: Awaitable[Response]) -> Response:
    """The response, or the ProxyError raised on the way as an Anthropic-shaped error."""
    try:
        return await work
    except ProxyError as exc:
        return anthropic_error(exc.status, exc.message, exc.headers, exc.details)


async def _create(request: Request) -> Response:
    res: Resources = request.app.state.resources
    presented = resolve_auth(request.headers, res.settings)
    digest = hash_key(presented.key) if presented is not None else None  # the memo's scope too
    if digest is not None and digest in request.app.state.keys:
        # a key this process has checked before (cached by deps): the body is parsed first, so the
        # conversation's prompt entry is read in the key check's round trip (the check still
        # answers first)
        parsed = await _parsed(request, digest)
        prefetch = EntryPrefetch(request, parsed[2])
        tenant, auth, replies = await authenticate(request, prefetch.reads)
    else:
        # anyone else is checked before the body is even read (no parse for an unknown caller)
        tenant, auth, replies = await authenticate(request)
        parsed = await _parsed(request, digest)
        prefetch = EntryPrefetch(request, None)
    raw, read, conversation, invalid = parsed
    if invalid is not None:
        raise invalid
    assert read is not None  # read unless invalid
    body = read.body
    if body.get("thread") is not None:
        thread = body["thread"]
        kind = thread.get("type") if isinstance(thread, dict) else None
        log.info("proxy.thread_refused", tenant_id=tenant, thread=str(kind)[:20])
        raise ProxyError(400, THREADS_UNSUPPORTED, details=THREADS_DETAILS)
    call = Call(request, res, tenant, auth, body, context_window=window_header(request.headers), read=read)
    if conversation is None:
        log.info("proxy.passed_through", tenant_id=tenant, reason="side_request")
        return await _pass_through(call, raw, "/v1/messages")
    call.conversation = conversation
    call.jobs = jobs = HeldJobs(request.app.state.enqueue)
    try:
        await _reconcile_and_build(call, jobs, prefetch.entry(replies))
        response = await _open(call, "/v1/messages", call.upstream_raw)
    except ProxyError:
        await _settled(call)  # stored before the client hears anything, an error included
        _release_soon(jobs)
        raise
    except BaseException:
        _release_soon(jobs)
        raise
    if response.status_code != 200:
        await _settled(call)
        _release_soon(jobs)
        return await _upstream_error(response)
    if body.get("stream"):
        return EventStream(
            _stream(call, response),
            headers=returned_headers(response.headers),
            media_type="text/event-stream",
            background=BackgroundTask(_record, call),
        )
    relay = Relay(call.hidden)
    if not await _collected(call, relay, response):
        _release_soon(jobs)
        log.info("proxy.client_disconnected", tenant_id=tenant, streaming=False)
        return Response(status_code=499)  # nobody reads it; nothing is recorded
    if relay.rounds and relay.current.error:
        _release_soon(jobs)
        return anthropic_error(502, "the upstream stream ended with an error")
    return Response(
        orjson.dumps(relay.client_response()),
        media_type="application/json",
        headers=returned_headers(response.headers),
        background=BackgroundTask(_record, call),
    )


async def _collected(call: Call, relay: Relay, response: UpstreamResponse) -> bool:
    """Every round of a non-streaming answer read into `relay`; False when the client disconnected
    first: the upstream call is then closed at once (_rounds closes it), as for a stream."""
    done = False
    async with anyio.create_task_group() as group:

        async def collect() -> None:
            nonlocal done
            async for _ in _rounds(call, relay, response):
                pass
            done = True
            group.cancel_scope.cancel()

        group.start_soon(collect)
        await _disconnected(call.request)
        group.cancel_scope.cancel()
    return done


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the body is read: what comes next is http.disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _settled(call: Call) -> None:
    """Wait for the request's history to be stored and its version noted; a note Redis did not take
    is logged (the next fetch reads the database's stamp instead, as with the cache down)."""
    # shielded: a client that leaves (its cancellation) does not stop what follows the commit
    if call.settling is not None and not await asyncio.shield(call.settling):
        log.warning("proxy.version_note_failed", tenant=call.tenant, session_id=call.session_id)


def _release_soon(jobs: HeldJobs | None) -> None:
    """jobs.release() in a worker thread, not awaited: the response does not wait for the enqueue.
    Sent once the first event is relayed (or the call ends without one): the enqueue (a Redis claim,
    a broker publish: ~1 ms of CPU) and the worker it wakes stay off the path to the first byte."""
    if jobs is None:
        return
    if jobs.holding:
        in_background(jobs.release)
    else:
        jobs.release()


class EntryPrefetch:
    """The cached prompt entry of the session a request most likely extends (its conversation's
    branch moved last, as this process remembers it), read in the key check's Redis round trip
    rather than one of its own (reconcile_ahead takes it when its plan picks that session)."""

    def __init__(self, request: Request, conversation: Conversation | None) -> None:
        self.request, self.conversation = request, conversation
        self.read: tuple[str, int] | None = None  # (session id, pk) whose entry was asked for

    def reads(self, tenant: int) -> list[tuple[str, ...]]:
        if self.conversation is None:
            return []
        records = self.request.app.state.proxy_records.get((tenant, self.conversation.key))
        cache = self.request.app.state.resources.cache
        pk = cache.pks.get((tenant, records[0].session_id)) if records else None
        if pk is None:
            return []
        self.read = (records[0].session_id, pk)
        return [self.request.app.state.entry_memo.read(cache.prompts, pk)]

    def entry(self, replies: list[Any] | None) -> Prefetched | None:
        """(session id, pk, its entry or None: none cached); None when nothing was read, or what
        was read cannot stand for the entry (a stale held copy, an error reply such as LOADING):
        reconcile_ahead reads it again. The fetch route's EntryMemo: a held copy costs no read."""
        if self.read is None or not replies:
            return None
        entry = self.request.app.state.entry_memo.answer(self.read[1], replies[0])
        return None if entry is False else (*self.read, entry)


Parsed = tuple[bytes, BodyRead | None, Conversation | None, ProxyError | None]


async def _parsed(request: Request, scope: str | None) -> Parsed:
    """The raw body, the body read (its messages folded: Claude Code's role "system" messages go
    into user turns, as a session stores user and assistant turns only), the conversation it
    continues (None: a side request or a bad body) and the error a bad body is answered with (after
    the key check: a bad key is a 401 first). A history that starts with bytes a recent request of
    the same key (`scope`: its digest) sent is parsed from its new part (KnownPrefixes)."""
    raw = await request.body()
    try:
        known: KnownPrefixes = request.app.state.known_prefixes
        read = known.read(scope, raw, parse_body)
        named = session_header(request.headers)
    except ProxyError as exc:
        return raw, None, None, exc
    body = read.body
    if is_side_request(body, named is not None):
        return raw, read, None, None
    return raw, read, identify(request.app.state.proxy_key, body, named), None


async def _reconcile_and_build(call: Call, jobs: HeldJobs, prefetched: Prefetched | None) -> None:
    """Reconcile the history with its session, store what it adds, and build the upstream request
    from the ready prompt.

    The usual request (it extends the branch this process remembers, and only this process wrote
    its session since) is served ahead: one worker thread renders its prompt with its new turns
    (_served_ahead), the upstream call opens, and its commit runs beside it (_settle_soon); a commit
    that cannot be made then is followed by the ordinary reconcile, never by a second call. Any
    other request is reconciled and stored the ordinary way before the call opens, which answers
    what stops it (400 for a broken history, 503 for a conversation that keeps changing ...)."""
    assert call.conversation is not None  # identified by _create
    given = call.body.get("tools")
    client_tools: list[Any] = given if isinstance(given, list) else []
    call.proxied = Proxied(
        call.res,
        call.tenant,
        call.conversation,
        call.body,
        [*client_tools, *_compactd_tools()],
        call.context_window,
        jobs,
        call.request.app.state.proxy_records,
        prefetched,
    )
    chains: list[str] = []
    chained = partial(_chained, call.request.app.state, call.read)
    # one thread hop: the hashing, the ingest, the render and the upstream body
    ahead = await in_thread(_served_ahead, call.proxied, chained, chains)
    if ahead is not None:
        done, (call.upstream_raw, call.hidden) = ahead
        call.session_id = done.plan.session_id
        count_served(call.request, call.tenant, done.plan.session_id, done.served)
        _settle_soon(call, done, chains)
        return
    await _reconcile_in_order(call, chains)


async def _reconcile_in_order(call: Call, chains: list[str]) -> None:
    """Reconcile and store the history, then fetch the ready prompt and build the upstream request."""
    res, body, proxied = call.res, call.body, call.proxied
    assert proxied is not None  # set by _reconcile_and_build
    memo: fingerprints.ChainMemo = call.request.app.state.proxy_chains
    served = None
    for missing in (False, True):
        try:
            # one thread hop for the hashing and the append
            reconciled = await in_thread(_reconciled, proxied, memo, chains, missing)
            call.reconciled = reconciled
            _stored(call)
        except (InvalidTranscript, BrokenConversation) as exc:
            problems = getattr(exc, "problems", [])
            detail = "; ".join(problems[:3]) if problems else str(exc)
            raise ProxyError(400, res.redactor.redact_text(f"messages: {detail}")[:500]) from None
        except Unreconciled:
            raise ProxyError(503, "the conversation changed under this request; retry") from None
        try:
            served = await serve_prompt(call.request, call.tenant, reconciled.plan.session_id)
            break
        except NotFound:
            continue  # the session was deleted after the record was made: start it anew
        except ApiError as exc:
            raise ProxyError(exc.status, exc.detail or exc.title) from None
    if served is None:
        raise ProxyError(503, "the conversation's session could not be served; retry")
    call.session_id = reconciled.plan.session_id
    call.upstream_raw, call.hidden = upstream_bytes(body, served.body, _compactd_tools())


def _settle_soon(call: Call, ahead: Ahead, chains: list[str]) -> None:
    """Store the request served ahead beside the upstream call (settle, in a worker thread: its
    commit, else the ordinary reconcile), then note its version; not waited for before the call
    opens, waited for before the client's first byte (_settled)."""

    async def settling() -> bool:
        try:
            reconciled, stopped = await in_thread(settle, ahead, chains)
        except Exception as exc:
            # the client still gets its answer; its next request carries this history and stores it
            # (the ordinary way: settle forgot what this process last wrote); an error of no known
            # kind is a bug
            expected = isinstance(
                exc, InvalidTranscript | BrokenConversation | Unreconciled | SQLAlchemyError
            )
            log.warning(
                "proxy.request_unrecorded",
                tenant_id=call.tenant,
                session_id=ahead.plan.session_id,
                error=type(exc).__name__,
                exc_info=not expected,
            )
            return True
        if stopped is not None:
            log.info("proxy.ahead_failed", session_id=ahead.plan.session_id, error=type(stopped).__name__)
        call.reconciled = reconciled
        _stored(call)
        return await _noted(call, reconciled.unnoted)

    call.settling = asyncio.ensure_future(settling())


async def _noted(call: Call, appended: Appended | None) -> bool:
    """note_version on the key check's connection: a Redis round trip the event loop drives (no
    thread hop). Best effort, as note_version: False when Redis did not take it."""
    if appended is None:
        return True
    guard: Guard = call.request.app.state.guard
    return await guard.send([note_command(call.res, appended)])


def _stored(call: Call) -> None:
    """The request's history is stored: the previous reply, if still waiting out its grace, is in
    it (or the client left it out): it is not recorded on its own."""
    grace: ReplyGrace = call.request.app.state.proxy_replies
    grace.supersede((call.tenant, call.conversation.key))  # type: ignore[union-attr]


def _reconciled(
    proxied: Proxied, memo: fingerprints.ChainMemo, chains: list[str], missing: bool
) -> Reconciled:
    """reconcile, the history's chain computed first (once: kept in `chains` for a second try;
    only the messages past the conversation's last request's unchanged prefix are hashed)."""
    if not chains:
        memo_key = (proxied.tenant_id, proxied.conversation.key)
        chains.extend(memo.chains(memo_key, proxied.body["messages"]))
    return reconcile(proxied, chains, missing)


def _chained(state: Any, read: BodyRead | None, proxied: Proxied) -> list[str]:
    """The history's chains: the known part's and its new messages' (KnownPrefixes), else the
    ChainMemo's computation; the history is then kept for the next request."""
    if read is not None and read.chains is not None:
        chains = read.chains
    else:
        memo: fingerprints.ChainMemo = state.proxy_chains
        chains = memo.chains((proxied.tenant_id, proxied.conversation.key), proxied.body["messages"])
    if read is not None:
        known: KnownPrefixes = state.known_prefixes
        known.learn(read, chains)
    return chains


def _served_ahead(
    proxied: Proxied, chained: Callable[[Proxied], list[str]], chains: list[str]
) -> tuple[Ahead, tuple[bytes, frozenset[str]]] | None:
    """In a worker thread: reconcile_ahead (the history's chain computed first, kept in `chains` for
    the ordinary path and for settle), the prompt rendered with the new turns, and the upstream
    body built from it. None: nothing served ahead."""
    try:
        chains.extend(chained(proxied))
        ahead = reconcile_ahead(proxied, chains)
    except Exception as exc:
        # whatever stops it (an unreadable message, the database): the ordinary path meets it
        # again and answers it as it does
        log.debug("proxy.ahead_skipped", error=type(exc).__name__)
        return None
    if ahead is None:
        return None
    return ahead, upstream_bytes(proxied.body, ahead.served.body, _compactd_tools())


def _compactd_tools() -> list[dict[str, Any]]:
    return tool_definitions() + memory_tool_definitions()


async def _open(call: Call, path: str, body: bytes) -> UpstreamResponse:
    client: Upstream = call.request.app.state.upstream
    try:
        return await open_stream(client, path, call.request.url.query, call.headers(), body)
    except httpx.TimeoutException:
        raise ProxyError(504, "the upstream did not answer in time") from None
    except httpx.HTTPError as exc:
        raise _unreachable(call, exc) from None


def _unreachable(call: Call, exc: Exception) -> ProxyError:
    """The 502 for an upstream that could not be reached, naming it (never its credentials), logged."""
    shown = shown_url(call.res.settings.upstream_url)
    log.warning("proxy.upstream_unreachable", upstream=shown, error=type(exc).__name__)
    return ProxyError(502, f"the upstream {shown} (COMPACTD_UPSTREAM_URL) could not be reached")


async def _upstream_error(response: UpstreamResponse) -> Response:
    """The upstream's error, status, headers and body, passed through unchanged."""
    try:
        data = await response.aread()
    finally:
        await response.aclose()
    return Response(data, status_code=response.status_code, headers=returned_headers(response.headers))


async def _pass_through(call: Call, raw: bytes, path: str) -> Response:
    """A side request: the client's body goes upstream as is; the answer comes back as is."""
    client: Upstream = call.request.app.state.upstream
    try:
        response = await open_stream(client, path, call.request.url.query, call.headers(), raw)
    except httpx.TimeoutException:
        raise ProxyError(504, "the upstream did not answer in time") from None
    except httpx.HTTPError as exc:
        raise _unreachable(call, exc) from None
    if response.status_code != 200 or not call.body.get("stream"):
        return await _upstream_error(response)

    async def relayed() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            yield encode_event("error", error_body("api_error", "the upstream connection failed mid-stream"))
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    return EventStream(relayed(), headers=returned_headers(response.headers), media_type="text/event-stream")


async def _rounds(call: Call, relay: Relay, response: UpstreamResponse) -> AsyncIterator[bytes]:
    """Every byte for the client, round after round, then the closing events; `call.answered` set
    once the client has them all (recorded after the response)."""
    settings = call.res.settings
    results: list[list[dict[str, Any]]] = []
    body: dict[str, Any] | None = None  # parsed only when a server-side round needs it
    try:
        await _settled(call)  # stored and noted before anything reaches the client
        while True:
            relay.start_round()
            splitter = EventSplitter()
            try:
                async for chunk in response.aiter_raw():
                    for event in splitter.feed(chunk):
                        out = relay.feed(event)
                        if out:
                            yield out
                            _release_soon(call.jobs)
                            call.jobs = None  # sent once
            except httpx.HTTPError as exc:
                # the status line was 200: the failure can only be told in the stream, as the API does
                log.warning("proxy.upstream_stream_failed", error=type(exc).__name__)
                relay.current.error = True
                yield encode_event(
                    "error", error_body("api_error", "the upstream connection failed mid-stream")
                )
                return
            await response.aclose()
            r = relay.current
            if r.error or not r.assembler.done:
                log.warning("proxy.upstream_stream_ended", error=r.error)
                if not r.error:
                    yield encode_event("error", error_body("api_error", "the upstream stream ended early"))
                    r.error = True
                return
            if not relay.should_continue(settings.proxy_tool_rounds):
                break
            answered = await in_thread(
                proxy_tools.answer_calls,
                call.res,
                call.tenant,
                call.session_id,
                r.hidden_calls(),
                call.request.app.state.enqueue,
            )
            results.append(answered)
            body = orjson.loads(call.upstream_raw) if body is None else body
            body["messages"] = [
                *body["messages"],
                {"role": "assistant", "content": r.assembler.content()},
                {"role": "user", "content": answered},
            ]
            log.info(
                "proxy.tool_round",
                session_id=call.session_id,
                calls=[c.get("name") for c in r.hidden_calls()],
            )
            try:
                response = await _open(call, "/v1/messages", orjson.dumps(body))
            except ProxyError as exc:
                yield encode_event("error", error_body(anthropic_type(exc.status), exc.message))
                relay.current.error = True
                return
            if response.status_code != 200:
                data = await response.aread()
                await response.aclose()
                try:
                    payload = orjson.loads(data)
                except orjson.JSONDecodeError:
                    payload = error_body("api_error", f"upstream status {response.status_code}")
                yield encode_event("error", payload)
                relay.current.error = True
                return
        yield relay.finish()
        call.answered = (relay, results)
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()


async def _record(call: Call) -> None:
    """Append the answer the client received, once the response is complete: the append's time is
    not the client's. A next request that comes first appends the client's copy instead (the
    conversation's record decides which one stores it; worker/store/proxy.py); a plain reply waits
    a moment for it (api/http/replies.py)."""
    _release_soon(call.jobs)
    if call.answered is None or call.reconciled is None:
        return  # cut short (an error, a disconnect), or its history could not be stored: not recorded
    relay, results = call.answered
    plan_ = call.reconciled.plan
    log.info(
        "proxy.answered",
        tenant_id=call.tenant,
        session_id=plan_.session_id,
        reconciled=plan_.kind,
        appended=call.reconciled.appended,
        rounds=len(relay.rounds),
        stop_reason=relay.final_stop_reason(),
        # messages of the history read from the memo, not parsed again (KnownPrefixes)
        known_messages=call.read.base.messages if call.read is not None else 0,
    )
    stored, client_message = relay.stored_messages(results), relay.client_message()
    grace: ReplyGrace = call.request.app.state.proxy_replies
    conversation = (call.tenant, call.conversation.key)  # type: ignore[union-attr]
    if may_wait(stored, client_message) and await grace.superseded(conversation):
        log.debug("proxy.reply_superseded", tenant_id=call.tenant, session_id=plan_.session_id)
        return
    try:
        await in_thread(
            record_reply,
            call.proxied,  # type: ignore[arg-type]
            plan_,
            stored,
            client_message,
        )
    except Exception as exc:
        # the client still gets its answer; its next request carries the reply and reconciles it
        log.warning("proxy.reply_unrecorded", error=type(exc).__name__)


async def _stream(call: Call, response: UpstreamResponse) -> AsyncIterator[bytes]:
    relay = Relay(call.hidden)
    async for out in _rounds(call, relay, response):
        yield out


class ProviderKeyIn(BaseModel):
    # printable ASCII, no spaces: what an HTTP header value carries
    api_key: str = Field(min_length=1, max_length=500, pattern=r"^[!-~]+$")


class ProviderKeyOut(BaseModel):
    key_id: str | None  # public id of the key compactd holds for the tenant; None: it holds none


@router.put("/v1/provider-key", include_in_schema=False)
async def put_provider_key(request: Request, tenant: TenantDep, body: ProviderKeyIn) -> ProviderKeyOut:
    """Hold this provider key for the calling tenant (sealed; docs/proxy.md "Who is calling")."""
    return ProviderKeyOut(key_id=await _set_provider_key(request, tenant, body.api_key))


@router.get("/v1/provider-key", include_in_schema=False)
async def get_provider_key(request: Request, tenant: TenantDep) -> ProviderKeyOut:
    """Whether compactd holds a provider key for the calling tenant: its public id, never the key."""
    res: Resources = request.app.state.resources
    return ProviderKeyOut(key_id=await in_thread(provider_key_id, res.engine, tenant))


@router.delete("/v1/provider-key", include_in_schema=False, status_code=204)
async def delete_provider_key(request: Request, tenant: TenantDep) -> Response:
    """Stop holding a provider key for the calling tenant (COMPACTD_UPSTREAM_API_KEY applies again)."""
    await _set_provider_key(request, tenant, None)
    return Response(status_code=204)


async def _set_provider_key(request: Request, tenant: int, key: str | None) -> str | None:
    res: Resources = request.app.state.resources
    master = redaction_key(res.settings)
    kid = await in_thread(set_provider_key, res.engine, master, tenant, key)
    request.app.state.provider_keys.forget(tenant)
    log.info("proxy.provider_key_set" if key else "proxy.provider_key_cleared", tenant_id=tenant, key_id=kid)
    return kid


# what the count_tokens endpoint takes of a Messages request
COUNT_FIELDS = (
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "mcp_servers",
    "context_management",
)


async def _count(request: Request) -> Response:
    tenant, auth, _ = await authenticate(request)
    res: Resources = request.app.state.resources
    raw = await request.body()
    body = parse_body(raw)
    named = session_header(request.headers)
    call = Call(request, res, tenant, auth, body)
    path = "/v1/messages/count_tokens"
    if is_side_request(body, named is not None):
        return await _pass_through(call, raw, path)
    counted = await _as_sent(call, identify(request.app.state.proxy_key, body, named))
    return await _pass_through(call, raw if counted is None else orjson.dumps(counted), path)


async def _as_sent(call: Call, conversation: Conversation) -> dict[str, Any] | None:
    """The count_tokens body for what compactd would send now: its prompt for the conversation's
    session plus the messages not stored yet, without storing them; None for an unknown history
    (it is counted as the client sent it)."""
    res, body = call.res, call.body
    memo: fingerprints.ChainMemo = call.request.app.state.proxy_chains
    chains = await in_thread(memo.chains, (call.tenant, conversation.key), body["messages"])
    records = await in_thread(load_records, res.engine, call.tenant, conversation.key)
    p = plan(records, chains, conversation.key)
    if p.kind not in ("same", "extend"):
        return None
    try:
        served = await serve_prompt(call.request, call.tenant, p.session_id)
    except ApiError:
        return None
    upstream, _ = build_upstream(body, orjson.loads(served.body), _compactd_tools())
    upstream["messages"] = merge_roles([*upstream["messages"], *body["messages"][p.start :]])
    return {k: upstream[k] for k in COUNT_FIELDS if k in upstream}


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
