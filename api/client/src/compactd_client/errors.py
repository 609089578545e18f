"""The client's one error hierarchy: the API's problem+json answers and an unreachable service."""

from __future__ import annotations

from typing import Any


class CompactdError(Exception):
    """Root of everything the client raises on purpose."""


class ProblemError(CompactdError):
    """The API answered with an RFC 9457 problem: `status`, `title`, `detail` and any extensions
    (`errors`, `field`, `problems`, ...) as the server sent them."""

    def __init__(self, status: int, title: str, detail: str | None, problem: dict[str, Any]) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.problem = problem
        super().__init__(f"{status} {title}" + (f": {detail}" if detail and detail != title else ""))

    @classmethod
    def from_response(cls, status: int, body: Any, text: str) -> ProblemError:
        """A problem from a response body; a non-problem body (a proxy's HTML page) keeps its start as detail."""
        if isinstance(body, dict) and "title" in body:
            return cls(int(body.get("status", status)), str(body["title"]), body.get("detail"), body)
        return cls(status, "HTTP error", text[:200] or None, {"status": status})


class UnreachableError(CompactdError):
    """compactd could not be reached (connection refused, timeouts) after every retry."""
