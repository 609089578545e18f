"""BearerRequired: a /v1 request without a bearer key is a 401 before anything reads it."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from api.http import errors
from api.http.middleware.paths import compactd_api


class BearerRequired:
    """401 problem for a /v1 request without an `Authorization: Bearer` header, before anything else
    looks at it: an anonymous caller learns nothing about its body or parameters. The key itself is
    checked by deps.get_tenant."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and compactd_api(scope["path"]):
            header = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, key = header.partition(b" ")
            if scheme.lower() != b"bearer" or not key.strip():
                response = errors.problem(
                    401, "Unauthorized", "send Authorization: Bearer <api key>", path=scope["path"]
                )
                return await response(scope, receive, send)
        await self.app(scope, receive, send)
