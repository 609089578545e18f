"""Which shape an error answer takes, by path: each drop-in endpoint answers in its SDK's shape.

compactd's own API answers RFC 9457 problem+json. A drop-in endpoint's callers are another
provider's SDK, which parses only that provider's error body: so every error on such a path — the
route's, a middleware's before it (body limit, JSON only, auth, rate limit), an exception
handler's, a 404 or 405 — is built here in that provider's shape, with the same status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

PROBLEM_JSON = "application/problem+json"

# Anthropic's error types by status (https://docs.claude.com/en/api/errors); another 4xx is an
# invalid_request_error, another 5xx an api_error, as the provider says it does
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def anthropic_type(status: int) -> str:
    """The Anthropic error type a status is answered with."""
    return ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def anthropic_body(status: int, title: str, detail: str | None, **_: Any) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`: what the anthropic SDKs parse."""
    return {"type": "error", "error": {"type": anthropic_type(status), "message": detail or title}}


def problem_body(status: int, title: str, detail: str | None, **extensions: Any) -> dict[str, Any]:
    """RFC 9457: type, title, status, detail and the error's own fields."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    if detail:
        body["detail"] = detail
    body.update(extensions)
    return body


@dataclass(frozen=True, slots=True)
class Shape:
    """How one family of clients expects an error: its body and media type."""

    name: str
    body: Callable[..., dict[str, Any]]  # (status, title, detail, **extensions) -> the JSON body
    media_type: str


# OpenAI's error types by status (its SDKs pick the exception class by status, and read
# error.message, error.type and error.code)
OPENAI_TYPES = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"),
    404: ("invalid_request_error", "not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def openai_error(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    """`{"error": {"message", "type", "param", "code"}}`: what the openai SDKs parse."""
    kind, default_code = OPENAI_TYPES.get(
        status, ("invalid_request_error" if status < 500 else "server_error", None)
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": code or default_code}}


def openai_body(status: int, title: str, detail: str | None, **_: Any) -> dict[str, Any]:
    return openai_error(status, detail or title)


PROBLEM = Shape("problem+json", problem_body, PROBLEM_JSON)
ANTHROPIC = Shape("anthropic", anthropic_body, "application/json")
OPENAI = Shape("openai", openai_body, "application/json")

# path prefix -> the shape of every error answered under it; the first match wins, anything else
# is compactd's own API (problem+json)
SHAPES: tuple[tuple[str, Shape], ...] = (
    ("/v1/messages", ANTHROPIC),  # and /v1/messages/count_tokens
    ("/v1/responses", OPENAI),  # and /v1/responses/compact, /v1/responses/input_tokens
    ("/v1/chat/completions", OPENAI),
    ("/v1/models", OPENAI),
)


def shape_for(path: str) -> Shape:
    """The error shape of requests to `path`."""
    for prefix, shape in SHAPES:
        if path == prefix or path.startswith(prefix + "/"):
            return shape
    return PROBLEM


def drop_in(path: str) -> bool:
    """Whether `path` is another provider's API (its route authenticates and answers itself)."""
    return shape_for(path) is not PROBLEM


def error_response(
    path: str,
    status: int,
    title: str,
    detail: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extensions: Any,
) -> Response:
    """The error answer for a request to `path`, in that path's shape."""
    shape = shape_for(path)
    body = shape.body(status, title, detail, **extensions)
    return Response(orjson.dumps(body), status_code=status, media_type=shape.media_type, headers=headers)
