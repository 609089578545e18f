"""RequestLog: one log line and the Prometheus request metrics per request; never bodies."""

from __future__ import annotations

import time

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from structlog.contextvars import clear_contextvars

from api.http.prometheus import Metrics

log = structlog.get_logger("compactd.api")


class RequestLog:
    """One log line and metrics per request: method, route, status, ms. Never bodies."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        ended = None
        status = 500
        clear_contextvars()

        async def send_status(message: Message) -> None:
            nonlocal status, ended
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = time.perf_counter()

        try:
            await self.app(scope, receive, send_status)
        finally:
            # until the response's last byte: a background task after it (a proxied reply's
            # recording, api/http/replies.py) is not the request's latency
            seconds = (ended or time.perf_counter()) - started
            route = _route(scope)
            self.metrics.record_request(scope["method"], route, status, seconds)
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
