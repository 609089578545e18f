"""Domain errors of the service (store, flows, shared request rules). Each edge maps them to its
own protocol: the API to problem+json in api/http/errors.py, the `compactd.append` task to a rejection."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Root of the service's own errors."""


class TransientError(ServiceError):
    """Raised when a retry later may succeed (a lock held, a dropped connection); the only error retried."""


class SessionLocked(TransientError):
    """Raised when another worker holds the session's compaction lock."""


class TurnTooLarge(ServiceError):
    """Raised when one message of an append is over max_turn_bytes; names its index and the limit."""

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions
