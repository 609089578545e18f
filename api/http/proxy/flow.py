"""The drop-in proxy flow, the same for every wire format (docs/proxy.md).

identify (the edge) -> reconcile the history with its session and build the upstream request from
the ready prompt (served ahead of its commit in the usual case) -> open the upstream call -> relay
its stream round after round, compactd's own tool calls answered in between (`_rounds`) -> record
the reply once the client has it (`_record`). What differs per format comes from its `Format`
(api/http/proxy/formats.py); errors are raised as ProxyError and answered in the format's shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import orjson
import structlog
from fastapi import Request
from fastapi.responses import Response
from starlette.background import BackgroundTask

from api.http.proxy.call import Call, EventStream, open_upstream, upstream_error
from api.http.proxy.errors import ProxyError
from api.http.proxy.formats import StreamRelay
from api.http.proxy.reconcile import reconcile_and_build
from api.http.replies import ReplyGrace, may_wait
from api.http.threads import in_background, in_thread
from api.http.upstream import UpstreamResponse, returned_headers
from worker.flows import proxy_tools
from worker.flows.held_jobs import HeldJobs
from worker.flows.proxy import Prefetched, record_reply
from worker.proxy.sse import EventSplitter
from worker.redaction.redact import is_reasoning_item

log = structlog.get_logger("compactd.proxy")


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
        if not relay.failed():  # a failed answer is relayed, not recorded
            call.answered = (relay, results)
            _log_answered(call)
        if call.reconciled is not None and call.answered is not None and _store_first(call, relay, results):
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


def _store_first(call: Call, relay: StreamRelay, results: list[list[dict[str, Any]]]) -> bool:
    """Whether the reply is stored before the client hears its end, because the client's next
    request (however soon it comes) could not stand for it: compactd's own rounds (the later
    reasoning was produced on them), an OpenAI reasoning item (many clients send back only the
    text), or a response a later `previous_response_id` names (it must resolve at once)."""
    if results or call.on_recorded is not None:
        return True
    return any(is_reasoning_item(b) for b in relay.client_message()["content"])


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
        await in_thread(call.on_recorded, relay)
