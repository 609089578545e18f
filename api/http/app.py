"""create_app(settings): the FastAPI app; the lifespan puts resources, the job sender and metrics on app.state."""

from __future__ import annotations

import asyncio
import gc
import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio.to_thread
import structlog
from fastapi import FastAPI

from api.http import errors
from api.http.guard import Guard
from api.http.middleware.bearer import BearerRequired
from api.http.middleware.body_limit import BodyLimit
from api.http.middleware.fast_paths import FastPaths
from api.http.middleware.json_only import JsonOnly
from api.http.middleware.request_log import RequestLog
from api.http.prometheus import Metrics
from api.http.proxy import messages, openai, provider_keys
from api.http.replies import ReplyGrace
from api.http.routes import files, health, memory, prompt, sessions, turns, ui
from api.http.threads import ANYIO_THREADS, in_thread
from api.http.upstream import upstream_client
from worker.cache.prompts import EntryMemo
from worker.contracts import Enqueue
from worker.enqueue import CeleryEnqueue
from worker.flows.proxy import RecordMemo, provider_key_reader, proxy_key
from worker.keyfile import redaction_key
from worker.logs import configure_logging
from worker.proxy.fingerprints import ChainMemo
from worker.proxy.known_prefix import KnownPrefixes
from worker.proxy.provider_keys import HeldKeys
from worker.resources import Resources
from worker.settings import Settings
from worker.store.proxy import tenant_upstream_url

log = structlog.get_logger("compactd.api")


def create_app(settings: Settings, *, enqueue: Enqueue | None = None, log_setup: bool = False) -> FastAPI:
    """The API. `enqueue(tenant, session pk, version)` schedules a compaction (default: Celery)."""
    if log_setup:
        configure_logging(settings.log_level, fmt=settings.log_format)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        res = Resources.build(settings)
        anyio.to_thread.current_default_thread_limiter().total_tokens = ANYIO_THREADS
        owned = CeleryEnqueue(settings, res) if enqueue is None else None
        try:
            app.state.resources = res
            app.state.guard = Guard(
                res.cache.client,
                settings.redis_prefix,
                settings.rate_limit_per_second,
                settings.rate_limit_burst,
                res.cache.breaker,
            )
            app.state.entry_memo = EntryMemo(settings.prompt_memo_mb << 20)
            app.state.enqueue = owned or enqueue
            # one client per upstream API: the Messages API's and the OpenAI-compatible server's
            app.state.upstreams = {
                "anthropic": upstream_client(settings),
                "openai": upstream_client(settings, settings.openai_upstream_url),
            }
            # a tenant's own upstream (compactd tenant upstream), and the clients for those in use
            app.state.tenant_upstreams = {
                name: HeldKeys(partial(tenant_upstream_url, res.engine, provider=name))
                for name in ("anthropic", "openai")
            }
            app.state.upstream_pool = {}
            app.state.proxy_key = proxy_key(redaction_key(settings))
            app.state.provider_keys = {
                name: HeldKeys(provider_key_reader(res.engine, redaction_key(settings), name))
                for name in ("anthropic", "openai")
            }
            app.state.proxy_chains = ChainMemo(app.state.proxy_key)
            app.state.known_prefixes = KnownPrefixes(settings.proxy_prefix_memo_mb << 20)
            app.state.proxy_records = RecordMemo()
            app.state.proxy_replies = ReplyGrace(settings.proxy_reply_grace_seconds)
            app.state.metrics.attach(res)
            # start-up garbage is long-lived: move it out of the collector's way (cuts p99)
            gc.collect()
            gc.freeze()
            app.state.fetch_log = []
            flusher = asyncio.create_task(flush_fetch_log(app, res))
            log.info("api.started", host=settings.host, port=settings.port, redaction=settings.redaction)
            try:
                yield
            finally:
                # appends in flight (their requests cancelled by the server's shutdown): stored and
                # noted before anything closes
                await asyncio.gather(*app.state.appending, return_exceptions=True)
                flusher.cancel()
                await _flush_once(app, res)
                await in_thread(app.state.metrics.close)
                for client in [*app.state.upstreams.values(), *app.state.upstream_pool.values()]:
                    await client.aclose()
        finally:
            gc.unfreeze()
            if owned is not None:
                owned.close()
            if hasattr(app.state, "guard"):
                app.state.guard.close()
            res.close()

    app = FastAPI(
        title="compactd",
        version="1",
        summary="Keeps long-running LLM agents inside their context window without making them wait.",
        lifespan=lifespan,
        **NO_TELEMETRY,
    )
    app.openapi = lambda: documented_errors(app)  # type: ignore[method-assign]
    app.state.keys = {}
    app.state.appending = set()  # api/http/routes/turns.py
    app.state.metrics = Metrics()
    errors.install(app)
    for module in (turns, prompt, sessions, memory, files, health, ui, messages, openai, provider_keys):
        app.include_router(module.router)
    # innermost: a fetch or an append on its fast path still passes every check below it
    app.add_middleware(
        FastPaths, handlers=app.exception_handlers, paths=[prompt.fast_path(), turns.fast_path()]
    )
    app.add_middleware(JsonOnly)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    # outside the body limit: an anonymous request is a 401 whatever its size (it learns nothing)
    app.add_middleware(BearerRequired)
    app.add_middleware(RequestLog, metrics=app.state.metrics)
    return app


# compactd exports no OpenTelemetry: FastAPI's native telemetry (0.16x) would otherwise look up the
# global providers (os.environ reads) on every request, ~5% of a fetch's CPU
NO_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)

PROBLEM_SCHEMA = {
    "type": "object",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
}
# every answer an operation can give besides its own: what api/http/errors.py and the middlewares send
ERRORS = {
    "400": "Malformed JSON or a bad request",
    "401": "No, unknown, revoked or expired API key",
    "404": "No such session or file for this tenant",
    "405": "Method not allowed",
    "413": "Request body or one turn too large",
    "415": "The body is not declared application/json",
    "422": "The request does not match the schema or cannot apply",
    "429": "This API key is over its rate limit (Retry-After)",
    "500": "Internal error (logged; no details)",
    "503": "A dependency is down; retry (Retry-After)",
}
PUBLIC_PATHS = {"/healthz", "/readyz", "/metrics"}


def documented_errors(app: FastAPI) -> dict[str, object]:
    """The OpenAPI document with every problem+json answer documented, so clients (and schemathesis)
    know them; built once, like FastAPI's own."""
    if app.openapi_schema:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    problem = {"application/problem+json": {"schema": PROBLEM_SCHEMA}}
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for code, text in ERRORS.items():
                if path in PUBLIC_PATHS and code not in ("500", "503"):
                    continue
                # FastAPI documents its 422 as application/json: every error here is problem+json
                responses[code] = {
                    "description": responses.get(code, {}).get("description", text),
                    "content": problem,
                }
    doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"] = {
        "text/plain": {"schema": {"type": "string"}}
    }
    app.openapi_schema = doc
    return doc


FLUSH_SECONDS = 0.5


async def flush_fetch_log(app: FastAPI, res: Resources) -> None:
    """Write the fetches' cache-reuse records to Redis every FLUSH_SECONDS, off the fetch path."""
    while True:
        await asyncio.sleep(FLUSH_SECONDS)
        await _flush_once(app, res)


async def _flush_once(app: FastAPI, res: Resources) -> None:
    batch, app.state.fetch_log = app.state.fetch_log, []
    if batch:
        await in_thread(res.cache.counters.record_fetches, batch)
