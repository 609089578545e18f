"""The client's pure parts: retry timing, Retry-After parsing, what is retried, problem decoding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from compactd_client.agent import as_output, assistant_content, tool_result
from compactd_client.client import append_call, update_memory_call
from compactd_client.errors import ProblemError
from compactd_client.retry import RetryPolicy, parse_retry_after, retryable_error, retryable_status
from hypothesis import given
from hypothesis import strategies as st

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@given(st.integers(0, 60), st.floats(0, 1))
def test_backoff_stays_within_half_and_all_of_its_capped_ceiling(attempt: int, rand: float) -> None:
    policy = RetryPolicy(base=0.25, cap=8.0)
    ceiling = min(8.0, 0.25 * 2**attempt)
    assert ceiling / 2 <= policy.backoff(attempt, rand) <= ceiling


@given(st.floats(0, 10_000, allow_nan=False))
def test_retry_after_in_seconds_wins_up_to_max_wait(seconds: float) -> None:
    policy = RetryPolicy(max_wait=60)
    assert policy.wait(0, f"{seconds}") == min(seconds, 60)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3", 3.0),
        (" 0.5 ", 0.5),
        ("-2", 0.0),
        (format_datetime(NOW + timedelta(seconds=7), usegmt=True), 7.0),
        (format_datetime(NOW - timedelta(seconds=7), usegmt=True), 0.0),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_an_unusable_retry_after_falls_back_to_backoff() -> None:
    assert 0.125 <= RetryPolicy(base=0.25).wait(0, "later") <= 0.25


@pytest.mark.parametrize(
    ("status", "idempotent", "non_idempotent"),
    [
        (429, True, True),
        (503, True, True),
        (502, True, False),
        (504, True, False),
        (500, False, False),
        (422, False, False),
    ],
)
def test_which_answers_are_retried(status: int, idempotent: bool, non_idempotent: bool) -> None:
    assert retryable_status(status) is idempotent
    assert retryable_status(status, unsent_only=True) is non_idempotent


def test_a_request_that_may_have_arrived_is_retried_only_when_idempotent() -> None:
    request = httpx.Request("PATCH", "http://x")
    lost = httpx.ReadError("reset", request=request)
    refused = httpx.ConnectError("refused", request=request)
    assert retryable_error(lost, unsent_only=False) and not retryable_error(lost, unsent_only=True)
    assert retryable_error(refused, unsent_only=True)


def test_calls_carry_the_key_and_idempotency_class() -> None:
    call = append_call("a/b", [{"role": "user", "content": "x"}], idempotency_key="k", activity="busy")
    assert call.path == "/v1/sessions/a%2Fb/turns"
    assert call.headers == {"Idempotency-Key": "k", "X-Compactd-Activity": "busy"}
    assert call.json == {"messages": [{"role": "user", "content": "x"}]}
    assert not call.retry_unsent_only and update_memory_call("s", []).retry_unsent_only


def test_problems_and_other_error_bodies_decode() -> None:
    p = ProblemError.from_response(
        404, {"title": "Not found", "status": 404, "detail": "no such session"}, ""
    )
    assert (p.status, p.title, p.detail, str(p)) == (
        404,
        "Not found",
        "no such session",
        "404 Not found: no such session",
    )
    q = ProblemError.from_response(502, None, "<html>Bad gateway</html>")
    assert (q.status, q.title, q.detail) == (502, "HTTP error", "<html>Bad gateway</html>")


def test_assistant_content_keeps_only_request_params() -> None:
    reply = {
        "content": [
            {"type": "text", "text": "hi", "citations": None},
            {"type": "tool_use", "id": "t", "name": "n", "input": {"a": None}, "caller": None},
        ]
    }
    assert assistant_content(reply) == [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "t", "name": "n", "input": {"a": None}},
    ]
    assert tool_result("t", as_output(42)) == {"type": "tool_result", "tool_use_id": "t", "content": "42"}
