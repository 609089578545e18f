"""create_app(settings): the FastAPI app; the lifespan puts resources, the job sender and metrics on app.state."""

from __future__ import annotations

import asyncio
import gc
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from structlog.contextvars import clear_contextvars

from api import errors
from api.guard import Guard
from api.metrics import Metrics
from api.routes import files, health, memory, prompt, sessions, turns, ui
from worker.celery_app import sender
from worker.logs import configure_logging
from worker.resources import Resources, broker_url, redis_url
from worker.settings import Settings

log = structlog.get_logger("compactd.api")

Enqueue = Callable[[int, int, int], None]


def create_app(settings: Settings, *, enqueue: Enqueue | None = None, log_setup: bool = False) -> FastAPI:
    """The API. `enqueue(tenant, session pk, version)` schedules a compaction (default: Celery)."""
    if log_setup:
        configure_logging(settings.log_level)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        res = Resources.build(settings)
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
            app.state.enqueue = owned or enqueue
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
                flusher.cancel()
                await _flush_once(app, res)
                await run_in_threadpool(app.state.metrics.close)
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
    )
    app.openapi = lambda: documented_errors(app)  # type: ignore[method-assign]
    app.state.keys = {}
    app.state.metrics = Metrics()
    errors.install(app)
    for module in (turns, prompt, sessions, memory, files, health, ui):
        app.include_router(module.router)
    # innermost: the fetch's fast path still passes every check below it
    prompt_route = next(
        r for r in prompt.router.routes if getattr(r, "path", None) == "/v1/sessions/{sid}/prompt"
    )
    app.add_middleware(prompt.PromptFastPath, handlers=app.exception_handlers, route=prompt_route)
    app.add_middleware(JsonOnly)
    app.add_middleware(BearerRequired)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestLog, metrics=app.state.metrics)
    return app


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
# every answer an operation can give besides its own: what api/errors.py and the middlewares send
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
        await run_in_threadpool(res.cache.record_fetches, batch)


# A claim outlives any wait in the queue it guards; if its message is lost, the next append after
# it expires sends another (and the beat sweep finds the session before that).
JOB_CLAIM_SECONDS = 30.0


class CeleryEnqueue:
    """Make sure one compaction job is pending for the session (ids only), to run at once.

    Coalesced, not debounced: while a job waits, appends send nothing more. A broker outage is
    logged, and the beat sweep catches up. `close()` (or `with`) releases the broker connections.
    """

    def __init__(self, settings: Settings, res: Resources) -> None:
        self.settings, self.res = settings, res
        self.celery = sender(settings)
        # its own connections, not kombu's process-wide pool, so close() can release them
        self.pool = self.celery.connection_for_write().Pool(limit=self.celery.conf.broker_pool_limit)
        self.shared_broker = broker_url(settings) == redis_url(settings)

    def __call__(self, tenant_id: int, session_pk: int, version: int) -> None:
        claimed = self.res.cache.claim_job(session_pk, JOB_CLAIM_SECONDS)
        if claimed is None and self.shared_broker:
            # Redis is down and it is the broker too: sending would only wait out its timeouts.
            # The turns are committed; the beat sweep compacts the session once Redis is back.
            log.warning("compaction.enqueue_skipped", session_id=session_pk, reason="redis_unavailable")
            return
        if claimed is False:
            return
        try:
            with self.pool.acquire(block=True) as connection:
                self.celery.send_task(
                    "compactd.compact",
                    args=[tenant_id, session_pk, version],
                    queue=self.settings.queue,
                    retry=False,
                    connection=connection,
                )
        except Exception as exc:
            self.res.cache.release_job_claim(session_pk)
            log.warning("compaction.enqueue_failed", session_id=session_pk, error=type(exc).__name__)

    def close(self) -> None:
        self.pool.force_close_all()
        self.celery.close()

    def __enter__(self) -> CeleryEnqueue:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class BodyLimit:
    """413 problem for bodies over max_bytes, whether Content-Length says so or the stream shows it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                response = errors.problem(
                    413, "Request body too large", f"the limit is {self.max_bytes} bytes"
                )
                return await response(scope, receive, send)
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise errors.PayloadTooLarge(f"the limit is {self.max_bytes} bytes")
            return message

        await self.app(scope, limited, send)


class BearerRequired:
    """401 problem for a /v1 request without an `Authorization: Bearer` header, before anything else
    looks at it: an anonymous caller learns nothing about its body or parameters. The key itself is
    checked by deps.get_tenant."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            header = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, key = header.partition(b" ")
            if scheme.lower() != b"bearer" or not key.strip():
                response = errors.problem(401, "Unauthorized", "send Authorization: Bearer <api key>")
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class JsonOnly:
    """415 problem for a /v1 request with a body that is not declared application/json (or +json).

    Without it a missing Content-Type would be parsed as JSON and a wrong one reported as a schema
    mismatch; the cause is the header, so the answer names the header.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            headers = dict(scope["headers"])
            problem = media_type_problem(headers.get(b"content-type"), _has_body(headers))
            if problem:
                response = errors.problem(415, "Unsupported media type", problem)
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length", b"0")
    return b"transfer-encoding" in headers or not length.isdigit() or int(length) > 0


def media_type_problem(content_type: bytes | None, has_body: bool) -> str | None:
    """Why a body with this Content-Type is refused, or None when it is JSON (or there is no body)."""
    if not has_body:
        return None
    if content_type is None:
        return "the request has a body but no Content-Type header: send Content-Type: application/json"
    media = content_type.split(b";", 1)[0].strip().lower()
    if media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json")):
        return None
    # named back only when it looks like a media type: a header is request input too
    shown = media.decode("latin-1") if _MEDIA_TYPE.fullmatch(media) else "an unreadable value"
    return f"the body must be JSON: send Content-Type: application/json (got {shown})"


_MEDIA_TYPE = re.compile(rb"[a-z0-9!#$&^_.+-]{1,40}/[a-z0-9!#$&^_.+-]{1,60}")


class RequestLog:
    """One log line and metrics per request: method, route, status, ms. Never bodies."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500
        clear_contextvars()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - started
            route = _route(scope)
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.latency.labels(scope["method"], route).observe(seconds)
            log.info(
                "request.served",
                method=scope["method"],
                route=route,
                status=status,
                ms=round(seconds * 1000, 2),
            )


def _route(scope: Scope) -> str:
    route = scope.get("route")
    return getattr(route, "path", None) or "unmatched"
