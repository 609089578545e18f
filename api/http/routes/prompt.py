"""GET /v1/sessions/{sid}/prompt: the ready prompt, from stored bytes; never waits for compaction."""

from __future__ import annotations

import inspect
import re
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from api.http.deps import authorize
from api.http.errors import NotFound, Unavailable
from api.http.routes.paths import SessionId
from api.http.schemas import PromptResponse
from worker.cache.prompts import EntryMemo
from worker.flows.serve import Served, fallback, fetch_ready
from worker.resources import Resources
from worker.store.db import is_sqlite

router = APIRouter(tags=["prompt"])
log = structlog.get_logger("compactd.api")


@router.get(
    "/v1/sessions/{sid}/prompt",
    response_class=Response,
    responses={200: {"model": PromptResponse, "content": {"application/json": {}}}},
)
async def get_prompt(sid: SessionId, request: Request) -> Response:
    """{system, messages} ready for anthropic.messages.create, with every appended turn in it and
    never more than budget_tokens; `fallback` says when the worker had not kept up ("pending":
    the summary prepared ahead, "fit": compacted on the spot without an LLM)."""
    return Response(await prompt_body(sid, request), media_type="application/json")


async def prompt_body(sid: str, request: Request) -> bytes:
    """get_prompt's answer: the response body (also sent as is by PromptFastPath)."""
    # the hot path: auth and resources without FastAPI's dependency solver (a third of the request's CPU)
    res: Resources = request.app.state.resources
    cache = res.cache
    memo: EntryMemo = request.app.state.entry_memo
    known: list[int] = []

    def entry_read(tenant: int) -> list[tuple[str, ...]]:
        # the session's cached entry (or, when this process holds it, its stamp), read in the key
        # check's Redis round trip
        pk = cache.pks.get((tenant, sid))
        if pk is None:
            return []
        known.append(pk)
        return [memo.read(cache.prompts, pk)]

    tenant, replies = await authorize(request, entry_read)
    prefetched = None
    if replies:
        entry = memo.answer(known[0], replies[0])
        if entry is not False:  # False: the held copy is stale; the fetch reads the entry
            prefetched = (known[0], entry)
    served = await serve_prompt(request, tenant, sid, prefetched)
    return served.body


async def serve_prompt(
    request: Request, tenant: int, sid: str, prefetched: tuple[int, Any] | None = None
) -> Served:
    """The ready prompt of a session (the fetch use case, shared with POST /v1/messages): never
    waits for compaction, never over budget; NotFound when there is no such session. `prefetched`:
    (session pk, its cached entry) already read with the key check."""
    res: Resources = request.app.state.resources
    cache = res.cache
    if is_sqlite(res.engine):
        # a local file read (the Redis read came with the key check): cheaper inline than a thread hop
        served = fetch_ready(res.engine, cache, tenant, sid, res.policy_for, prefetched)
    else:
        served = await run_in_threadpool(
            fetch_ready, res.engine, cache, tenant, sid, res.policy_for, prefetched
        )
    if served is None:
        raise NotFound("no such session")
    if not served.fits:
        # the worker is down or behind: the pending summary or a fit, computed off the event loop
        try:
            served = await run_in_threadpool(fallback, res.engine, res.cache, tenant, sid, res.policy_for)
        except Exception as exc:
            log.error("prompt.fallback_failed", error=type(exc).__name__)
            raise Unavailable(
                "the prompt does not fit yet and no fallback could be computed; retry"
            ) from None
        if served is None:
            raise NotFound("no such session")
    pk = count_served(request, tenant, sid, served)
    if not served.fits:
        # never expected (fit clips everything but a tiny system prompt); counted where operators look
        log.error("prompt.over_budget", tokens=served.tokens, budget_tokens=served.budget_tokens)
        res.cache.counters.count("fetches_over_budget")
    if served.fallback is not None:
        # say so, and make sure a job is on its way
        log.warning(
            "prompt.fallback_served", fallback=served.fallback, tokens=served.tokens, epoch=served.epoch
        )
        await run_in_threadpool(_after_fallback, request, res, tenant, pk, served)
    return served


def count_served(request: Request, tenant: int, sid: str, served: Served) -> int | None:
    """A served prompt in the metrics and, unless a fallback, in the cache-reuse log (buffered here,
    written to Redis in batches by the app, api/http/app.py); the session's pk when known."""
    request.app.state.metrics.record_fetch(served.source, served.tokens, served.budget_tokens)
    pk: int | None = request.app.state.resources.cache.pks.get((tenant, sid))
    if pk is not None and served.fallback is None:
        request.app.state.fetch_log.append((pk, served.epoch, served.request_bytes, served.stable_bytes))
    return pk


def _after_fallback(request: Request, res: Resources, tenant: int, pk: int | None, served: Served) -> None:
    """Count the fallback and send a job (Redis calls: off the event loop)."""
    res.cache.counters.count(f"fallbacks_{served.fallback}")
    if pk is not None:
        request.app.state.enqueue(tenant, pk, served.version)


# the session ids the route's SessionId accepts: anything else goes the full way (and gets its 422)
_PROMPT_PATH = re.compile(r"/v1/sessions/([A-Za-z0-9._:@-]{1,200})/prompt")


class PromptFastPath:
    """GET /v1/sessions/{sid}/prompt without FastAPI's routing, dependency solving and exception
    middleware: on a fetch those cost more CPU than the fetch itself (~0.25 of ~0.45 ms here).

    The same handler runs (`get_prompt`'s body, sent without building a Response), its errors go to the app's own exception handlers, and the
    route is put in the scope for the request log and metrics; the OpenAPI document still comes from
    the registered route. A request this path does not take whole (another method or path, an id
    the route would refuse, a body) goes on to the app unchanged. Installed innermost of the
    middlewares, so authentication, body and media-type checks and the request log still apply.
    """

    def __init__(self, app: ASGIApp, handlers: dict[Any, Any], route: Any) -> None:
        self.app, self.handlers, self.route = app, handlers, route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _PROMPT_PATH.fullmatch(scope["path"]) if scope["type"] == "http" else None
        if match is None or scope["method"] != "GET" or _has_body(scope):
            return await self.app(scope, receive, send)
        sid = match.group(1)
        scope["path_params"] = {"sid": sid}
        scope["route"] = self.route
        request = Request(scope, receive)
        try:
            body = await prompt_body(sid, request)
        except Exception as exc:
            handler = next((self.handlers[c] for c in _specific(type(exc)) if c in self.handlers), None)
            if handler is None:
                raise  # the app's last resort (a logged 500), as on the full path
            response = handler(request, exc)
            if inspect.isawaitable(response):
                response = await response
            return await response(scope, receive, send)
        # the stored bytes as they are, with the headers Response(body, media_type=...) would send
        await send({"type": "http.response.start", "status": 200, "headers": _headers(len(body))})
        await send({"type": "http.response.body", "body": body})


def _headers(length: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-length", b"%d" % length), (b"content-type", b"application/json")]


def _specific(kind: type[BaseException]) -> tuple[type, ...]:
    """An exception's classes below Exception: the ones the exception middleware would handle (a
    handler for Exception itself runs outermost, after which the error is raised on, as here)."""
    return tuple(c for c in kind.__mro__ if c not in (Exception, BaseException, object))


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return True
    return False
