"""The drop-in proxy flow, the same for every wire format (docs/proxy.md).

identify (the edge) -> reconcile the history with its session and build the upstream request from
the ready prompt (served ahead of its commit in the usual case) -> open the upstream call -> relay
its stream round after round, compactd's own tool calls answered in between (`_rounds`) -> record
the reply once the client has it (`_record`). What differs per format comes from its `Format`
(api/http/proxy/formats.py); errors are raised as ProxyError and answered in the format's shape.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import httpx
import orjson
import structlog
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.background import BackgroundTask
from starlette.types import Receive, Scope, Send

from api.http.errors import ApiError, NotFound
from api.http.guard import Guard
from api.http.jobs import note_command
from api.http.proxy.auth import ANTHROPIC, Auth
from api.http.proxy.errors import ProxyError
from api.http.proxy.formats import Format, StreamRelay, compactd_tools
from api.http.replies import ReplyGrace, may_wait
from api.http.routes.prompt import count_served, serve_prompt
from api.http.threads import in_background, in_thread
from api.http.upstream import (
    Upstream,
    UpstreamResponse,
    forwarded_headers,
    open_stream,
    returned_headers,
    upstream_client,
)
from worker.compaction.errors import InvalidTranscript
from worker.flows import proxy_tools
from worker.flows.append import BrokenConversation
from worker.flows.held_jobs import HeldJobs
from worker.flows.proxy import (
    Ahead,
    Prefetched,
    Proxied,
    Reconciled,
    Unreconciled,
    reconcile,
    reconcile_ahead,
    record_reply,
    settle,
)
from worker.proxy import fingerprints
from worker.proxy.conversations import Conversation
from worker.proxy.known_prefix import BodyRead, KnownPrefixes
from worker.proxy.provider_keys import HeldKeys
from worker.proxy.sse import EventSplitter
from worker.resources import Resources
from worker.settings import shown_url
from worker.store.sessions import Appended

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
    pool: dict[str, Upstream] = state.upstream_pool
    if url not in pool:
        pool[url] = upstream_client(call.res.settings, url)
    return pool[url]


async def proxy(call: Call, prefetched: Prefetched | None) -> Response:
    """The request of an identified conversation, through compactd: its history stored, the ready
    prompt sent upstream, the answer streamed (or returned) to the client and recorded."""
    body, fmt = call.body, call.fmt
    call.jobs = jobs = HeldJobs(call.request.app.state.enqueue)
    try:
        await reconcile_and_build(call, jobs, prefetched)
        response = await open_upstream(call, call.upstream_raw)
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
        return await upstream_error(response)
    relay = fmt.relay(body, call.hidden)
    if body.get("stream"):
        return EventStream(
            _rounds(call, relay, response),
            headers=returned_headers(response.headers),
            media_type="text/event-stream",
            background=BackgroundTask(_record, call),
        )
    if not await _collected(call, relay, response):
        _release_soon(jobs)
        log.info("proxy.client_disconnected", tenant_id=call.tenant, streaming=False)
        return Response(status_code=499)  # nobody reads it; nothing is recorded
    if relay.rounds and relay.current.error:
        _release_soon(jobs)
        raise ProxyError(502, "the upstream stream ended with an error")
    return Response(
        orjson.dumps(relay.client_response()),
        media_type="application/json",
        headers={**returned_headers(response.headers), "content-type": "application/json"},
        background=BackgroundTask(_record, call),
    )


async def _collected(call: Call, relay: StreamRelay, response: UpstreamResponse) -> bool:
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


async def reconcile_and_build(call: Call, jobs: HeldJobs, prefetched: Prefetched | None) -> None:
    """Reconcile the history with its session, store what it adds, and build the upstream request
    from the ready prompt.

    The usual request (it extends the branch this process remembers, and only this process wrote
    its session since) is served ahead: one worker thread renders its prompt with its new turns
    (_served_ahead), the upstream call opens, and its commit runs beside it (_settle_soon); a commit
    that cannot be made then is followed by the ordinary reconcile, never by a second call. Any
    other request is reconciled and stored the ordinary way before the call opens, which answers
    what stops it (400 for a broken history, 503 for a conversation that keeps changing ...)."""
    assert call.conversation is not None  # identified by the edge
    body = call.use_case_body
    call.proxied = Proxied(
        call.res,
        call.tenant,
        call.conversation,
        body,
        [*(_client_tools(call.body)), *compactd_tools()],
        call.context_window,
        jobs,
        call.request.app.state.proxy_records,
        prefetched,
    )
    chains: list[str] = []
    known = call.chains
    chained = (
        partial(_chained, call.request.app.state, call.read) if known is None else (lambda _: list(known))
    )
    build = partial(call.fmt.upstream, call.body)
    # one thread hop: the hashing, the ingest, the render and the upstream body
    ahead = await in_thread(_served_ahead, call.proxied, chained, chains, build)
    if ahead is not None:
        done, (call.upstream_raw, call.hidden) = ahead
        call.session_id = done.plan.session_id
        count_served(call.request, call.tenant, done.plan.session_id, done.served)
        _settle_soon(call, done, chains)
        return
    await _reconcile_in_order(call, chains)


def _client_tools(body: dict[str, Any]) -> list[Any]:
    given = body.get("tools")
    return given if isinstance(given, list) else []


async def _reconcile_in_order(call: Call, chains: list[str]) -> None:
    """Reconcile and store the history, then fetch the ready prompt and build the upstream request."""
    res, proxied = call.res, call.proxied
    assert proxied is not None  # set by reconcile_and_build
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
    call.upstream_raw, call.hidden = call.fmt.upstream(call.body, served.body, compactd_tools())


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
    proxied: Proxied,
    chained: Callable[[Proxied], list[str]],
    chains: list[str],
    build: Callable[[bytes, list[dict[str, Any]]], tuple[bytes, frozenset[str]]],
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
    return ahead, build(ahead.served.body, compactd_tools())


async def open_upstream(call: Call, body: bytes) -> UpstreamResponse:
    client = await upstream_of(call)
    try:
        return await open_stream(client, call.fmt.path, call.request.url.query, call.headers(), body)
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
    try:
        client = await upstream_of(call)
        response = await open_stream(client, path, call.request.url.query, call.headers(), raw)
    except httpx.TimeoutException:
        raise ProxyError(504, "the upstream did not answer in time") from None
    except httpx.HTTPError as exc:
        raise unreachable(call, exc) from None
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


async def _rounds(call: Call, relay: StreamRelay, response: UpstreamResponse) -> AsyncIterator[bytes]:
    """Every byte for the client, round after round, then the closing events; `call.answered` set
    once the client has them all (recorded after the response)."""
    settings, fmt = call.res.settings, call.fmt
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
                yield relay.error_event(fmt.error_payload(502, "the upstream connection failed mid-stream"))
                return
            await response.aclose()
            if relay.current.error or not relay.round_done():
                log.warning("proxy.upstream_stream_ended", error=relay.current.error)
                if not relay.current.error:
                    yield relay.error_event(fmt.error_payload(502, "the upstream stream ended early"))
                    relay.current.error = True
                return
            if not relay.should_continue(settings.proxy_tool_rounds):
                break
            calls = relay.hidden_tool_uses()
            answered = await in_thread(
                proxy_tools.answer_calls,
                call.res,
                call.tenant,
                call.session_id,
                calls,
                call.request.app.state.enqueue,
            )
            results.append(answered)
            body = orjson.loads(call.upstream_raw) if body is None else body
            body = relay.extend_request(body, answered)
            log.info("proxy.tool_round", session_id=call.session_id, calls=[c.get("name") for c in calls])
            try:
                response = await open_upstream(call, orjson.dumps(body))
            except ProxyError as exc:
                yield relay.error_event(fmt.error_payload(exc.status, exc.message))
                relay.current.error = True
                return
            if response.status_code != 200:
                data = await response.aread()
                await response.aclose()
                try:
                    payload = orjson.loads(data)
                except orjson.JSONDecodeError:
                    payload = fmt.error_payload(502, f"upstream status {response.status_code}")
                yield relay.error_event(payload)
                relay.current.error = True
                return
        call.answered = (relay, results)
        _log_answered(call)
        if results:
            # compactd's own rounds: stored before the client hears the end, so its next request
            # (which carries only what it saw, however soon it comes) finds the rounds stored and
            # the upstream gets them again, as every later reasoning block was produced on them
            await _stored_reply(call)
        yield relay.finish()
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()


async def _record(call: Call) -> None:
    """Append the answer the client received, once the response is complete: the append's time is
    not the client's. A next request that comes first appends the client's copy instead (the
    conversation's record decides which one stores it; worker/store/proxy.py); a plain reply waits
    a moment for it (api/http/replies.py). A reply with compactd's own rounds is stored already
    (_rounds, before its last event)."""
    _release_soon(call.jobs)
    if call.answered is None or call.reconciled is None or call.recorded:
        return  # cut short (an error, a disconnect), its history could not be stored, or stored
    relay, results = call.answered
    stored, client_message = relay.stored_messages(results), relay.client_message()
    grace: ReplyGrace = call.request.app.state.proxy_replies
    conversation = (call.tenant, call.conversation.key)  # type: ignore[union-attr]
    waits = call.on_recorded is None and may_wait(stored, client_message)
    if waits and await grace.superseded(conversation):
        log.debug("proxy.reply_superseded", tenant_id=call.tenant, session_id=call.reconciled.plan.session_id)
        return
    await _stored_reply(call)


def _log_answered(call: Call) -> None:
    assert call.answered is not None
    relay = call.answered[0]
    plan_ = call.reconciled.plan if call.reconciled is not None else None
    log.info(
        "proxy.answered",
        tenant_id=call.tenant,
        session_id=plan_.session_id if plan_ else call.session_id,
        reconciled=plan_.kind if plan_ else None,
        appended=call.reconciled.appended if call.reconciled else 0,
        rounds=len(relay.rounds),
        format=call.fmt.name,
        # messages of the history read from the memo, not parsed again (KnownPrefixes)
        known_messages=call.read.base.messages if call.read is not None else 0,
    )


async def _stored_reply(call: Call) -> None:
    """Append the answer (and its server-side rounds) to the session it was served from."""
    assert call.answered is not None and call.reconciled is not None
    relay, results = call.answered
    plan_ = call.reconciled.plan
    call.recorded = True
    try:
        recorded = await in_thread(
            record_reply,
            call.proxied,  # type: ignore[arg-type]
            plan_,
            relay.stored_messages(results),
            relay.client_message(),
        )
    except Exception as exc:
        # the client still gets its answer; its next request carries the reply and reconciles it
        log.warning("proxy.reply_unrecorded", error=type(exc).__name__)
        recorded = False
    if recorded and call.on_recorded is not None:
        call.on_recorded(relay)


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
