"""Errors of the service edges (store, jobs). The API maps them to HTTP in api/errors.py only."""

from __future__ import annotations


class ServiceError(Exception):
    """Root of the service's own errors."""


class TransientError(ServiceError):
    """Raised when a retry later may succeed (a lock held, a dropped connection); the only error retried."""


class SessionLocked(TransientError):
    """Raised when another worker holds the session's compaction lock."""
