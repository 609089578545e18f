"""ProxyError: raised anywhere in a drop-in request, answered in the caller's SDK's error shape."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from fastapi.responses import Response

from api.http.error_shapes import anthropic_type, openai_error
from api.http.upstream import error_body


class ProxyError(Exception):
    """Raised inside a drop-in edge to answer with an error in its format's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.headers, self.details, self.code = (
            status,
            message,
            headers,
            details,
            code,
        )


def anthropic_response(exc: ProxyError) -> Response:
    body = error_body(anthropic_type(exc.status), exc.message)
    if exc.details:
        body["error"]["details"] = dict(exc.details)
    return Response(
        orjson.dumps(body), status_code=exc.status, media_type="application/json", headers=exc.headers
    )


def openai_response(exc: ProxyError) -> Response:
    body = openai_error(exc.status, exc.message, exc.code)
    return Response(
        orjson.dumps(body), status_code=exc.status, media_type="application/json", headers=exc.headers
    )
