"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API, with compactd inside.

A thin edge (docs/proxy.md): who is calling -> which conversation -> the proxy flow
(api/http/proxy/flow.py). The body is the canonical form itself; a history that starts with bytes
a recent request of the same key sent is parsed from its new part (KnownPrefixes). Errors are in
the Anthropic shape, since the callers are Anthropic clients.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

import orjson
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from api.http.errors import ApiError
from api.http.proxy.auth import authenticate, resolve_auth
from api.http.proxy.call import Call, pass_through
from api.http.proxy.errors import ProxyError, anthropic_response
from api.http.proxy.flow import proxy
from api.http.proxy.formats import MESSAGES, compactd_tools
from api.http.routes.prompt import serve_prompt
from api.http.threads import in_thread
from worker.compaction.assemble import merge_roles
from worker.flows.proxy import Prefetched
from worker.proxy import fingerprints
from worker.proxy.conversations import SESSION_ID, Conversation, identify, is_side_request
from worker.proxy.known_prefix import BodyRead, KnownPrefixes
from worker.proxy.outbound import build_upstream
from worker.proxy.reconcile import plan
from worker.resources import Resources
from worker.store.proxy import load_records
from worker.store.tenants import hash_key

router = APIRouter(tags=["messages"])
log = structlog.get_logger("compactd.proxy")

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
        return anthropic_response(exc)


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
    call = Call(
        request, res, tenant, auth, body, MESSAGES, context_window=window_header(request.headers), read=read
    )
    if conversation is None:
        log.info("proxy.passed_through", tenant_id=tenant, reason="side_request")
        return await pass_through(call, raw, "/v1/messages")
    call.conversation = conversation
    return await proxy(call, prefetch.entry(replies))


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
    call = Call(request, res, tenant, auth, body, MESSAGES)
    path = "/v1/messages/count_tokens"
    if is_side_request(body, named is not None):
        return await pass_through(call, raw, path)
    counted = await _as_sent(call, identify(request.app.state.proxy_key, body, named))
    return await pass_through(call, raw if counted is None else orjson.dumps(counted), path)


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
    upstream, _ = build_upstream(body, orjson.loads(served.body), compactd_tools())
    upstream["messages"] = merge_roles([*upstream["messages"], *body["messages"][p.start :]])
    return {k: upstream[k] for k in COUNT_FIELDS if k in upstream}
