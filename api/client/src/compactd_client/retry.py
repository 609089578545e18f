"""When to try a request again and how long to wait: pure functions of the attempt and the answer."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

RETRY_STATUSES = frozenset({429, 502, 503, 504})
REFUSED = frozenset({429, 503})
# nothing reached the server: safe to send again whatever the request was
UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter, capped; a server's Retry-After wins (up to `max_wait`)."""

    attempts: int = 5
    base: float = 0.25
    cap: float = 8.0
    max_wait: float = 60.0

    def backoff(self, attempt: int, rand: float | None = None) -> float:
        """Seconds before attempt `attempt + 1` (attempt counts from 0): half fixed, half jitter,
        so a crowd of clients retrying after one outage does not come back in step."""
        ceiling = min(self.cap, self.base * 2**attempt)
        return ceiling * (0.5 + 0.5 * (random.random() if rand is None else rand))

    def wait(self, attempt: int, retry_after: str | None, now: datetime | None = None) -> float:
        """The server's Retry-After when it gave a usable one, else the backoff."""
        told = parse_retry_after(retry_after, now)
        return min(told, self.max_wait) if told is not None else self.backoff(attempt)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def retryable_status(status: int, *, unsent_only: bool = False) -> bool:
    """Answers that mean "not now", never "no". 429 and 503 are refusals before any work; a
    gateway's 502/504 may come after the request reached the service, so not for non-idempotent ones."""
    return status in (REFUSED if unsent_only else RETRY_STATUSES)


def retryable_error(exc: Exception, *, unsent_only: bool) -> bool:
    """A transport failure worth another try; for a non-idempotent request only one that sent nothing."""
    if unsent_only:
        return isinstance(exc, UNSENT)
    return isinstance(exc, httpx.TransportError)
