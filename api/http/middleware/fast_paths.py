"""FastPaths: the hot routes (a fetch, an append) without FastAPI's routing and dependency solving.

On a fetch those cost more CPU than the fetch itself (~0.25 of ~0.45 ms when measured); on an append
of a typical turn about a third of the event loop's share. The route's own handler runs, its errors
go to the app's exception handlers, and the route is put in the scope for the request log and
metrics; the OpenAPI document still comes from the registered route. A request a path does not take
whole (another method or path, an id the route would refuse, a fetch with a body, an append its
handler will not take as it stands) goes on to the app unchanged, the body it read replayed, so
every refusal is the route's own. (One answer differs on purpose: a chunked body past
max_request_bytes is the 413 BodyLimit raises here, where the route turns it into a 400.)
Installed innermost of the middlewares: authentication, body and media-type checks and the
request log still apply.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# the session ids the routes' SessionId accepts (worker/contracts.py): anything else goes the full
# way (and gets the route's 422)
SESSION = r"([A-Za-z0-9._:@-]{1,200})"

# (session id, the request, its body: b"" for a path without one) -> the answer: bytes are a 200
# application/json body; None: not taken, the app answers the request
Handler = Callable[[str, Request, bytes], Awaitable[bytes | Response | None]]


@dataclass(frozen=True, slots=True)
class FastPath:
    method: str
    path: re.Pattern[str]  # one group: the session id
    route: Any  # the registered route, named in the scope as the router would
    handler: Handler
    body: bool = False  # whether requests carry a body (read before the handler runs)


class FastPaths:
    def __init__(self, app: ASGIApp, handlers: dict[Any, Any], paths: Sequence[FastPath]) -> None:
        self.app, self.handlers, self.paths = app, handlers, tuple(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for path in self.paths:
                match = path.path.fullmatch(scope["path"]) if path.method == scope["method"] else None
                if match is not None and (path.body or not _has_body(scope)):
                    return await self._take(path, match.group(1), scope, receive, send)
        await self.app(scope, receive, send)

    async def _take(self, path: FastPath, sid: str, scope: Scope, receive: Receive, send: Send) -> None:
        scope["path_params"] = {"sid": sid}
        scope["route"] = path.route
        request = Request(scope, receive)
        body = b""
        try:
            body = await request.body() if path.body else b""
            answer = await path.handler(sid, request, body)
        except ClientDisconnect:
            # the client left while sending: answered (to no one) and counted as the route does
            exc: Exception = HTTPException(400, "There was an error parsing the body")
            return await self._error(request, exc, send)
        except Exception as exc:
            return await self._error(request, exc, send)
        if answer is None:
            return await self.app(scope, _replay(body, receive) if path.body else receive, send)
        if isinstance(answer, Response):
            return await answer(scope, receive, send)
        # the bytes as they are, with the headers Response(body, media_type=...) would send
        await send({"type": "http.response.start", "status": 200, "headers": _headers(len(answer))})
        await send({"type": "http.response.body", "body": answer})

    async def _error(self, request: Request, exc: Exception, send: Send) -> None:
        """The app's own handler's answer to `exc`; with none, raised on (a logged 500, as on the
        full path)."""
        handler = next((self.handlers[c] for c in _specific(type(exc)) if c in self.handlers), None)
        if handler is None:
            raise exc
        response = handler(request, exc)
        if inspect.isawaitable(response):
            response = await response
        await response(request.scope, request.receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The request's body, already read, as the app's first receive; then the client's own."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def again() -> Message:
        return pending.pop() if pending else await receive()

    return again


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
