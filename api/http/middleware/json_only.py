"""JsonOnly: a /v1 body not declared JSON is a 415 problem naming the header."""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from api.http import errors
from api.http.middleware.paths import compactd_api


class JsonOnly:
    """415 problem for a /v1 request with a body that is not declared application/json (or +json).

    Without it a missing Content-Type would be parsed as JSON and a wrong one reported as a schema
    mismatch; the cause is the header, so the answer names the header.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and compactd_api(scope["path"]):
            headers = dict(scope["headers"])
            problem = media_type_problem(headers.get(b"content-type"), _has_body(headers))
            if problem:
                response = errors.problem(415, "Unsupported media type", problem, path=scope["path"])
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
