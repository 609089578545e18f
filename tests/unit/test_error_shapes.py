"""Which error shape a path answers in (api/http/error_shapes.py), and the URL shown for the upstream."""

from __future__ import annotations

import orjson
import pytest

from api.http.error_shapes import ANTHROPIC, PROBLEM, anthropic_type, error_response, shape_for
from worker.settings import shown_url


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/messages", ANTHROPIC),
        ("/v1/messages/count_tokens", ANTHROPIC),
        ("/v1/messages/anything/else", ANTHROPIC),
        ("/v1/messagesx", PROBLEM),
        ("/v1/sessions/s/turns", PROBLEM),
        ("/v1/provider-key", PROBLEM),
        ("/healthz", PROBLEM),
        ("", PROBLEM),
    ],
)
def test_each_path_has_its_shape(path: str, shape: object) -> None:
    """The drop-in's paths answer in the Anthropic shape; everything else in problem+json."""
    assert shape_for(path) is shape


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (405, "invalid_request_error"),
        (413, "request_too_large"),
        (415, "invalid_request_error"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_anthropic_types_follow_the_provider_s_table(status: int, kind: str) -> None:
    """Each status has the error type the Messages API documents (another 4xx: invalid_request_error)."""
    assert anthropic_type(status) == kind


def test_the_bodies_of_both_shapes() -> None:
    """Anthropic: {type: error, error: {type, message}}, the detail as the message; problem+json keeps
    title, status, detail and the error's own fields."""
    dropped = error_response("/v1/messages", 413, "Request body too large", "the limit is 10 bytes", limit=10)
    assert dropped.media_type == "application/json"
    assert orjson.loads(dropped.body) == {
        "type": "error",
        "error": {"type": "request_too_large", "message": "the limit is 10 bytes"},
    }
    own = error_response("/v1/sessions", 413, "Request body too large", "the limit is 10 bytes", limit=10)
    assert own.media_type == "application/problem+json"
    assert orjson.loads(own.body) == {
        "type": "about:blank",
        "title": "Request body too large",
        "status": 413,
        "detail": "the limit is 10 bytes",
        "limit": 10,
    }
    assert orjson.loads(error_response("/v1/messages", 405, "Method not allowed").body)["error"][
        "message"
    ] == ("Method not allowed")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com"),
        ("http://user:secret@127.0.0.1:8790/base/?token=x#frag", "http://127.0.0.1:8790/base"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
        ("not a url", "(not a URL)"),
    ],
)
def test_the_upstream_is_shown_without_credentials(url: str, shown: str) -> None:
    """Scheme, host, port and path; never a user, password, query or fragment."""
    assert shown_url(url) == shown
