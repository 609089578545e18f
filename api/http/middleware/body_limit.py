"""BodyLimit: a request body over max_request_bytes is a 413 (in the path's error shape), declared or streamed."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.http import errors


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
                    413, "Request body too large", f"the limit is {self.max_bytes} bytes", path=scope["path"]
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
