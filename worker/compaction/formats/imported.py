"""Imported: what every transcript importer returns (a valid Anthropic request plus a report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Imported:
    """A transcript mapped onto Anthropic Messages, with what the mapping skipped or synthesized.

    messages strictly alternate roles, start with the user and pass validate.request_problems;
    warnings name the line, index or event each repair happened at; meta holds counts and the
    message indexes of compaction boundaries (format-specific keys, documented per module).
    """

    system: str
    messages: list[dict[str, Any]]
    format: str
    warnings: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
