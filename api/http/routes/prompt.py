"""GET /v1/sessions/{sid}/prompt: the ready prompt, from stored bytes; never waits for compaction."""

from __future__ import annotations

import re
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from api.http.deps import authorize
from api.http.errors import NotFound, Unavailable
from api.http.middleware.fast_paths import SESSION, FastPath
from api.http.routes.paths import SessionId
from api.http.schemas import PromptResponse
from api.http.threads import in_thread
from worker.cache.prompts import EntryMemo
from worker.flows.serve import Served, fallback, fetch_ready
from worker.resources import Resources
from worker.store.db import is_sqlite

router = APIRouter(tags=["prompt"])
FETCH = "/v1/sessions/{sid}/prompt"
log = structlog.get_logger("compactd.api")


@router.get(
    FETCH,
    response_class=Response,
    responses={200: {"model": PromptResponse, "content": {"application/json": {}}}},
)
async def get_prompt(sid: SessionId, request: Request) -> Response:
    """{system, messages} ready for anthropic.messages.create, with every appended turn in it and
    never more than budget_tokens; `fallback` says when the worker had not kept up ("pending":
    the summary prepared ahead, "fit": compacted on the spot without an LLM)."""
    return Response(await prompt_body(sid, request), media_type="application/json")


async def prompt_body(sid: str, request: Request, _body: bytes = b"") -> bytes:
    """get_prompt's answer: the response body (also sent as is by its fast path, `fast_path`)."""
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
        served = await in_thread(fetch_ready, res.engine, cache, tenant, sid, res.policy_for, prefetched)
    if served is None:
        raise NotFound("no such session")
    if not served.fits:
        # the worker is down or behind: the pending summary or a fit, computed off the event loop
        try:
            served = await in_thread(fallback, res.engine, res.cache, tenant, sid, res.policy_for)
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
        await in_thread(_after_fallback, request, res, tenant, pk, served)
    return served


def count_served(request: Request, tenant: int, sid: str, served: Served) -> int | None:
    """A served prompt in the metrics and, unless a fallback, in the cache-reuse log (buffered here,
    written to Redis in batches by the app, api/http/app.py); the session's pk when known."""
    request.app.state.metrics.record_fetch(served.source, served.tokens, served.budget_tokens)
    pk: int | None = request.app.state.resources.cache.pks.get((tenant, sid))
    if pk is not None and served.fallback is None:
        request.app.state.fetch_log.append((pk, served.epoch, served.request_bytes, served.stable_bytes))
    if pk is not None and served.source == "cache" and served.entry is not None:
        # the epoch's first fetch claimed its `served_from`: a held copy of the entry learns it
        memo: EntryMemo = request.app.state.entry_memo
        memo.note_served_from(pk, served.entry)
    return pk


def _after_fallback(request: Request, res: Resources, tenant: int, pk: int | None, served: Served) -> None:
    """Count the fallback and send a job (Redis calls: off the event loop)."""
    res.cache.counters.count(f"fallbacks_{served.fallback}")
    if pk is not None:
        request.app.state.enqueue(tenant, pk, served.version)


def fast_path() -> FastPath:
    """A fetch without FastAPI's routing (api/http/middleware/fast_paths.py)."""
    route = next(r for r in router.routes if getattr(r, "path", None) == FETCH)
    return FastPath("GET", re.compile(f"/v1/sessions/{SESSION}/prompt"), route, prompt_body)
