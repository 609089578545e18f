"""Every error leaves the API here, as RFC 9457 application/problem+json: no request content, no traces."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from api.http.error_shapes import PROBLEM_JSON, error_response
from worker.compaction.errors import InvalidTranscript
from worker.compaction.reading import BadRead
from worker.errors import TurnTooLarge
from worker.store.memory import MemoryOverCap
from worker.store.sessions import IdempotencyMismatch

log = structlog.get_logger("compactd.api")

PROBLEM = PROBLEM_JSON
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE when lock_timeout passes
# Connection-level database failures (server down or restarting, pool exhausted, SQLite busy):
# 503 with Retry-After. Integrity and programming errors stay 500s.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
)


class ApiError(Exception):
    """Root of the errors routes raise; each subclass knows its status and title."""

    status = 400
    title = "Bad request"

    def __init__(self, detail: str | None = None, **extensions: Any) -> None:
        super().__init__(detail or self.title)
        self.detail = detail
        self.extensions = extensions


class Unauthorized(ApiError):
    """Raised when the bearer API key is missing or unknown."""

    status, title = 401, "Unauthorized"


class NotFound(ApiError):
    """Raised when a session (or file) does not exist for this tenant."""

    status, title = 404, "Not found"


class InvalidAppend(ApiError):
    """Raised when an append would make the session an invalid Anthropic conversation."""

    status, title = 422, "Invalid append"


class InvalidMemoryOp(ApiError):
    """Raised when a working-memory request cannot apply; `field` names the part to fix."""

    status, title = 422, "Invalid memory operation"

    def __init__(self, detail: str, *, field: str, loc: list[Any]) -> None:
        errors = [{"loc": [str(p) for p in loc], "msg": detail, "type": "memory_op"}]
        super().__init__(detail, field=field, errors=errors)


class InvalidCursor(ApiError):
    """Raised when a paging cursor is well formed but points nowhere a page can start."""

    status, title = 422, "Invalid cursor"


class Unavailable(ApiError):
    """Raised when a request cannot be served right now but may be on a retry (503, Retry-After)."""

    status, title = 503, "Service unavailable"


class PayloadTooLarge(ApiError):
    """Raised when a request body is over max_request_bytes."""

    status, title = 413, "Request body too large"


class TooManyRequests(ApiError):
    """Raised when an API key is over its rate limit; `retry_after_seconds` goes to Retry-After."""

    status, title = 429, "Too many requests"


def problem(
    status: int, title: str, detail: str | None = None, *, path: str = "", **extensions: Any
) -> Response:
    """The error answer: problem+json, or on a drop-in `path` its SDK's own shape (error_shapes.py)."""
    headers = (
        {"WWW-Authenticate": "Bearer"} if status == 401 else {"Retry-After": "1"} if status == 503 else None
    )
    return error_response(path, status, title, detail, headers, **extensions)


def _answer(
    request: Request, status: int, title: str, detail: str | None = None, **extensions: Any
) -> Response:
    return problem(status, title, detail, path=request.url.path, **extensions)


def _redacted(request: Request, value: Any) -> Any:
    """`value` with every secret replaced: the last guard for messages that quote part of a request."""
    resources = getattr(request.app.state, "resources", None)
    return value if resources is None else resources.redactor.redact_value(value)


def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    response = _answer(
        request, exc.status, exc.title, _redacted(request, exc.detail), **_redacted(request, exc.extensions)
    )
    if "retry_after_seconds" in exc.extensions:
        response.headers["Retry-After"] = str(exc.extensions["retry_after_seconds"])
    return response


def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    malformed = next((e for e in exc.errors() if e.get("type") == "json_invalid"), None)
    if malformed is not None:
        return _malformed_json(request, malformed)
    # field path, message and error type only: never the submitted value (pydantic's "input"/"ctx")
    errors = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": _safe_msg(e), "type": e.get("type", "")}
        for e in exc.errors()[:20]
    ]
    # a location can name a submitted key (an unknown field): redacted like any request content
    return _answer(
        request,
        422,
        "Invalid request",
        "the request does not match the schema",
        errors=_redacted(request, errors),
    )


def _malformed_json(request: Request, error: dict[str, Any]) -> Response:
    """400 saying the body is not JSON, where (line and column) and why, quoting none of it."""
    loc = error.get("loc", ())
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
    # the parser's reason ("Expecting value", "Unterminated string starting at"...) quotes no input
    reason = str((error.get("ctx") or {}).get("error", "not valid JSON"))[:100]
    body = getattr(request, "_body", None)
    where = ""
    if pos is not None and isinstance(body, bytes):
        # the parser's position counts characters of the decoded body
        before = body.decode("utf-8", errors="replace")[:pos]
        line, column = before.count("\n") + 1, pos - before.rfind("\n")
        where = f" at line {line}, column {column} (character {pos + 1})"
    return _answer(
        request,
        400,
        "Malformed JSON",
        f"the request body is not valid JSON: {reason}{where}",
        errors=[{"loc": ["body"], "msg": "body is not valid JSON", "type": "json_invalid"}],
    )


def _safe_msg(error: dict[str, Any]) -> str:
    if error.get("type") == "json_invalid":
        return "body is not valid JSON"
    return str(error.get("msg", ""))[:200]


def _turn_too_large(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TurnTooLarge)
    return _answer(
        request, 413, "Turn too large", _redacted(request, exc.detail), **_redacted(request, exc.extensions)
    )


def _invalid_transcript(request: Request, exc: Exception) -> Response:
    # redacted before cut: a cut through a secret would leave a piece no detector recognises
    return _answer(request, 422, "Invalid messages", _redacted(request, str(exc))[:500])


def _idempotency(request: Request, exc: Exception) -> Response:
    return _answer(
        request,
        422,
        "Idempotency key reused",
        "this Idempotency-Key was already used with a different request body",
    )


def _memory_cap(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MemoryOverCap)
    return _answer(
        request, 422, "Working memory over its hard cap", str(exc), tokens=exc.tokens, hard_cap_tokens=exc.cap
    )


def _bad_read(request: Request, exc: Exception) -> Response:
    message = _redacted(request, str(exc))
    # an invalid pattern's message quotes the pattern: keep only the rule
    detail = (
        "pattern must be a valid RE2 regular expression of 1-1000 characters"
        if "pattern" in message
        else message
    )
    return _answer(request, 422, "Invalid read", detail[:300])


# Starlette's own errors (an unknown path, a wrong method...) under the titles our errors use
_HTTP_TITLES = {e.status: e.title for e in (ApiError, Unauthorized, NotFound, PayloadTooLarge)} | {
    405: "Method not allowed",
    415: "Unsupported media type",
}


def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    return _answer(request, exc.status_code, _HTTP_TITLES.get(exc.status_code, "HTTP error"))


def _database_unavailable(request: Request, exc: Exception) -> Response:
    # the database is down, restarting or busy: nothing was committed, so a retry is safe
    code = getattr(getattr(exc, "orig", None), "sqlstate", None)
    log.warning("database.unavailable", path=request.url.path, error=type(exc).__name__, sqlstate=code)
    if code == LOCK_NOT_AVAILABLE:
        # another transaction held the session past COMPACTD_DB_LOCK_TIMEOUT_SECONDS (a frozen writer's
        # is ended by the server after COMPACTD_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS)
        return _answer(
            request,
            503,
            "Service unavailable",
            "the session is locked by another writer; nothing was stored, retry",
        )
    return _answer(
        request, 503, "Service unavailable", "the database is unavailable; nothing was stored, retry"
    )


def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("request.failed", path=request.url.path, error=type(exc).__name__, exc_info=exc)
    return _answer(request, 500, "Internal server error", "the error was logged")


def install(app: FastAPI) -> None:
    """Register every handler on the app."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(TurnTooLarge, _turn_too_large)
    app.add_exception_handler(InvalidTranscript, _invalid_transcript)
    app.add_exception_handler(IdempotencyMismatch, _idempotency)
    app.add_exception_handler(MemoryOverCap, _memory_cap)
    app.add_exception_handler(BadRead, _bad_read)
    app.add_exception_handler(StarletteHTTPException, _http)
    for unavailable in DATABASE_UNAVAILABLE:
        app.add_exception_handler(unavailable, _database_unavailable)
    app.add_exception_handler(Exception, _unexpected)
