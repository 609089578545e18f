"""POST /v1/responses and /v1/chat/completions: OpenAI's APIs, with compactd inside (docs/proxy.md
"OpenAI formats"); GET /v1/models passed through; a WebSocket upgrade on /v1/responses answered 426.

A thin edge: who is calling (a compactd key as the API key, or in x-compactd-key) -> the body read
into the canonical form (worker/proxy/wire/) -> which conversation (x-compactd-session, else the
client's own session id: Codex's `session-id`, `prompt_cache_key`, `user`; else a keyed hash of
the start) -> the proxy flow (api/http/proxy/flow.py). Errors are in OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response

from api.http.error_shapes import openai_error
from api.http.errors import ApiError
from api.http.proxy.auth import ANTHROPIC, OPENAI, authenticate
from api.http.proxy.call import Call, open_upstream, pass_through, upstream_error
from api.http.proxy.errors import ProxyError, anthropic_response, openai_response
from api.http.proxy.flow import proxy
from api.http.proxy.formats import CHAT, MESSAGES, RESPONSES, Format, StreamRelay, served_parts
from api.http.proxy.messages import session_header, window_header
from api.http.routes.prompt import serve_prompt
from api.http.threads import in_thread
from worker.compaction.summarize import prompt_summary
from worker.compaction.tokens import count_text
from worker.proxy import fingerprints
from worker.proxy.conversations import Conversation, client_id, identify, is_side_request
from worker.proxy.reconcile import Record, plan
from worker.proxy.wire import chat, responses
from worker.proxy.wire.responses import WireError
from worker.proxy.wire.responses_relay import response_stream, text_response
from worker.resources import Resources
from worker.store.proxy import find_response, load_records, save_response

router = APIRouter(tags=["openai"])
log = structlog.get_logger("compactd.proxy")

# how long a previous_response_id waits for its response to be recorded (the client may ask again
# as soon as the stream ends, while the reply is being stored)
PREVIOUS_WAIT_SECONDS = 3.0
MODEL_ID = re.compile(r"[A-Za-z0-9._:@-]{1,200}")
# the longest summary a client's own compaction is answered with
SUMMARY_TOKENS = 4_000
# stands for a message of the history a previous_response_id request leaves out: never stored
# (the plan stores only what comes after the record), and not a valid message if it were
_ELIDED = {"role": "elided"}


@router.post("/v1/responses", include_in_schema=False)
async def create_response(request: Request) -> Response:
    """The Responses API (streaming or not) through compactd."""
    return await _answered(_proxied(request, RESPONSES))


@router.post("/v1/chat/completions", include_in_schema=False)
async def create_chat_completion(request: Request) -> Response:
    """The Chat Completions API (streaming or not) through compactd."""
    return await _answered(_proxied(request, CHAT))


@router.post("/v1/responses/compact", include_in_schema=False)
async def compact_response(request: Request) -> Response:
    """A client's own compaction (Codex's remote compaction): answered at once from compactd's
    compacted history, never with a model call (docs/proxy.md "The client's own compaction")."""
    return await _answered(_compacted(request))


@router.websocket("/v1/responses")
async def responses_websocket(websocket: WebSocket) -> None:
    """Codex tries a WebSocket first and falls back to HTTP on a 426: compactd speaks HTTP only."""
    await websocket.send_denial_response(
        Response(
            orjson.dumps(
                openai_error(426, "compactd serves the Responses API over HTTP: use POST /v1/responses")
            ),
            status_code=426,
            media_type="application/json",
            headers={"upgrade": "HTTP/1.1"},
        )
    )


@router.get("/v1/models", include_in_schema=False)
async def list_models(request: Request) -> Response:
    """The upstream's model list, passed through (an Anthropic client's to the Messages upstream)."""
    return await _models(request, "/models")


@router.get("/v1/models/{model_id}", include_in_schema=False)
async def get_model(request: Request, model_id: str) -> Response:
    """One model, passed through; an id is a name, never a path (no `/`, no `..`)."""
    if not MODEL_ID.fullmatch(model_id) or ".." in model_id:
        return openai_response(ProxyError(404, f"no model {model_id[:80]!r}", code="model_not_found"))
    return await _models(request, f"/models/{model_id}")


async def _answered(work: Awaitable[Response]) -> Response:
    try:
        return await work
    except ProxyError as exc:
        return openai_response(exc)


def read_json(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProxyError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ProxyError(400, "the request body must be a JSON object")
    return body


def canonical_of(fmt: Format, body: dict[str, Any]) -> dict[str, Any]:
    """The canonical body of a request in `fmt`; a body the format cannot read is a 400."""
    if body.get("conversation") is not None:
        raise ProxyError(400, "conversation: compactd keeps the conversation itself; send the items")
    if body.get("background"):
        raise ProxyError(400, "background: compactd answers in the foreground (stream: true for long work)")
    try:
        return responses.canonical_request(body) if fmt is RESPONSES else chat.canonical_request(body)
    except WireError as exc:
        raise ProxyError(400, str(exc)) from None


def client_ids(
    fmt: Format, headers: Mapping[str, str], body: Mapping[str, Any], key: bytes
) -> tuple[str | None, str | None]:
    """(client session, its parent's) as the client tells them: Codex's session-id header (its
    thread) and x-codex-parent-thread-id (a sub-agent's), else prompt_cache_key, else `user` or
    metadata.session_id (Chat Completions clients)."""
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    candidates = (
        headers.get("session-id"),
        body.get("prompt_cache_key"),
        metadata.get("session_id") if isinstance(metadata, dict) else None,
        body.get("user") if fmt is CHAT else None,
    )
    client = next((c for c in (client_id(v, key) for v in candidates) if c is not None), None)
    return client, client_id(headers.get("x-codex-parent-thread-id"), key)


async def _proxied(request: Request, fmt: Format) -> Response:
    res: Resources = request.app.state.resources
    tenant, auth, _ = await authenticate(request, provider=OPENAI)
    raw = await request.body()
    body = read_json(raw)
    canonical = canonical_of(fmt, body)
    named = session_header(request.headers)
    call = Call(
        request,
        res,
        tenant,
        auth,
        body,
        fmt,
        canonical=canonical,
        context_window=window_header(request.headers),
    )
    if fmt is RESPONSES and is_client_compaction(request.headers):
        # its summary prompt is the last item: the history it asks about is every item before it
        before = canonical_of(RESPONSES, {**body, "input": responses.input_items(body)[:-1]})
        summary = await _summary(call, before["messages"], named)
        response = text_response(
            f"resp_compactd_{uuid.uuid4().hex[:24]}", body.get("model"), summary.text, summary.usage
        )
        log.info(
            "proxy.client_compaction_answered",
            tenant_id=tenant,
            session_id=summary.session_id,
            tokens=summary.usage["output_tokens"],
        )
        if body.get("stream"):
            return Response(response_stream(response), media_type="text/event-stream")
        return Response(orjson.dumps(response), media_type="application/json")
    previous = body.get("previous_response_id") if fmt is RESPONSES else None
    if previous:
        call.conversation, call.chains = await _continued(call, str(previous))
    elif is_side_request(canonical, named is not None):
        log.info("proxy.passed_through", tenant_id=tenant, reason="side_request", format=fmt.name)
        return await pass_through(call, raw, fmt.path)
    else:
        client, parent = client_ids(fmt, request.headers, body, request.app.state.proxy_key)
        call.conversation = identify(request.app.state.proxy_key, canonical, named, client, parent)
    if fmt is RESPONSES and body.get("store") is not False:
        call.on_recorded = _remember_response(call)
    return await proxy(call, None)


def is_client_compaction(headers: Mapping[str, str]) -> bool:
    """Codex asking the model for a summary of its own history (its turn metadata says so)."""
    raw = headers.get("x-codex-turn-metadata")
    if not raw:
        return False
    try:
        meta = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(meta, dict) and meta.get("request_kind") == "compaction"


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    usage: dict[str, Any]
    session_id: str | None


async def _summary(call: Call, messages: list[dict[str, Any]], named: str | None) -> Summary:
    """compactd's summary of the conversation `messages` continue: of its session's served prompt
    when compactd holds the conversation, else of the messages themselves (no model call)."""
    res = call.res
    canonical = {**(call.canonical or {}), "messages": messages}
    client, parent = client_ids(call.fmt, call.request.headers, call.body, call.request.app.state.proxy_key)
    conversation = identify(call.request.app.state.proxy_key, canonical, named, client, parent)
    memo: fingerprints.ChainMemo = call.request.app.state.proxy_chains
    chains = await in_thread(memo.chains, (call.tenant, conversation.key), messages)
    records = await in_thread(load_records, res.engine, call.tenant, conversation.key)
    p = plan(records, chains, conversation.key)
    served_messages, memory, session_id = messages, "", None
    if p.kind in ("same", "extend"):
        try:
            served = await serve_prompt(call.request, call.tenant, p.session_id)
            memory, served_messages = served_parts(served.body)
            served_messages = [*served_messages, *messages[p.start :]]
            session_id = p.session_id
        except ApiError:
            pass
    text = await in_thread(prompt_summary, served_messages, memory, SUMMARY_TOKENS)
    usage = {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": count_text(text),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": count_text(text),
    }
    return Summary(text, usage, session_id)


async def _compacted(request: Request) -> Response:
    res: Resources = request.app.state.resources
    tenant, auth, _ = await authenticate(request, provider=OPENAI)
    body = read_json(await request.body())
    canonical = canonical_of(RESPONSES, body)
    call = Call(request, res, tenant, auth, body, RESPONSES, canonical=canonical)
    summary = await _summary(call, canonical["messages"], session_header(request.headers))
    output = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary.text}]}]
    log.info(
        "proxy.client_compaction_answered",
        tenant_id=tenant,
        session_id=summary.session_id,
        tokens=summary.usage["output_tokens"],
    )
    answer = {
        "id": f"resp_compactd_{uuid.uuid4().hex[:24]}",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": summary.usage,
    }
    return Response(orjson.dumps(answer), media_type="application/json")


async def _continued(call: Call, previous: str) -> tuple[Conversation, list[str]]:
    """A request that continues `previous` (a response compactd answered): its conversation, and the
    chains of its history (the record's for the part the request leaves out, then its own items');
    the canonical body gets stand-ins for the left-out part. Only the conversation's latest response
    can be continued: compactd stores one history per branch, and the items before `previous` are
    what it holds, compacted, not what the client sent."""
    found = await _find_response(call, previous)
    if found is None:
        raise ProxyError(
            400, f"Previous response with id '{previous[:80]}' not found.", code="previous_response_not_found"
        )
    key, record = found
    records = await in_thread(load_records, call.res.engine, call.tenant, key)
    if record not in records:
        raise ProxyError(
            409,
            "previous_response_id: that response is no longer the latest of its conversation; compactd"
            " continues a conversation from its latest response (send the whole input to branch)",
        )
    assert call.canonical is not None
    new = call.canonical["messages"]
    chains = [""] * record.messages + [record.chain]
    for message in new:
        chains.append(fingerprints.extend_hex(chains[-1], message))
    call.canonical["messages"] = [_ELIDED] * record.messages + new
    return Conversation(key, "previous_response"), chains


async def _find_response(call: Call, response_id: str) -> tuple[str, Record] | None:
    """The response's record, waited for a moment (its reply may still be being stored): a few
    reads, a quarter of a second apart, not a tight loop on the database."""
    deadline = time.monotonic() + PREVIOUS_WAIT_SECONDS
    while True:
        found = await in_thread(find_response, call.res.engine, call.tenant, response_id)
        if found is not None or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.25)


def _remember_response(call: Call) -> Callable[[StreamRelay], None]:
    """After the reply is recorded: where its response id leaves the conversation."""

    def remember(relay: StreamRelay) -> None:
        response_id = str(getattr(relay, "first", {}).get("id") or "")
        if not response_id or call.reconciled is None or call.conversation is None:
            return
        before = call.reconciled.plan.after
        after = Record(
            before.session_id,
            before.messages + 1,
            fingerprints.extend_hex(before.chain, relay.client_message()),
        )
        try:
            save_response(call.res.engine, call.tenant, response_id, call.conversation.key, after)
        except Exception as exc:
            log.warning("proxy.response_unsaved", error=type(exc).__name__)

    return remember


async def _models(request: Request, path: str) -> Response:
    """GET a model list or model through to the upstream the caller's SDK speaks to."""
    anthropic = "anthropic-version" in request.headers
    provider, fmt = (ANTHROPIC, MESSAGES) if anthropic else (OPENAI, RESPONSES)
    answer = anthropic_response if anthropic else openai_response
    try:
        tenant, auth, _ = await authenticate(request, provider=provider)
        call = Call(request, request.app.state.resources, tenant, auth, {}, fmt)
        target = f"/v1{path}" if anthropic else path
        return await upstream_error(await open_upstream(call, b"", target, "GET"))
    except ProxyError as exc:
        return answer(exc)
