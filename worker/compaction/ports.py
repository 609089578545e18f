"""Ports: the protocols through which pure stages reach the outside world (implemented at the edges)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a summarizer sees: only redacted text of the evicted span, never raw content."""

    span_text: str  # the evicted turns rendered as text (redacted), oldest first
    previous_note: str | None  # the handoff note being folded into the new one, if any
    focus: str | None  # the user's focus instructions (POST .../compact), if any
    archive_ref: str  # the archive file that holds the span verbatim
    max_tokens: int  # the note's ceiling


@dataclass(frozen=True, slots=True)
class SummaryResult:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = "extractive"


class Summarizer(Protocol):
    """Turns an evicted span into a handoff note. Raises SummarizerError (or TransientError) on failure."""

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...


class SummarizerError(Exception):
    """Raised when a summarizer could not produce a note; compaction keeps the structural result."""
