"""Reading virtual files back: line ranges, byte ranges and regex search (RE2: linear time)."""

from __future__ import annotations

from dataclasses import dataclass

import re2

from worker.compaction.errors import CompactionError

MAX_LINES_PER_READ = 2_000
MAX_BYTES_PER_READ = 256 * 1024
MAX_PATTERN_CHARS = 1_000


class BadRead(CompactionError, ValueError):
    """Raised when a read's range or pattern is invalid; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class Excerpt:
    text: str
    description: str  # e.g. "lines 10-40 of 900": what the read log records
    total_lines: int
    truncated: bool = False


def read_lines(text: str, start_line: int | None, end_line: int | None) -> Excerpt:
    """Lines start..end (1-based, inclusive), at most MAX_LINES_PER_READ of them."""
    lines = text.splitlines(keepends=True)
    start = 1 if start_line is None else start_line
    end = len(lines) if end_line is None else end_line
    if start < 1 or end < start:
        raise BadRead("start_line must be >= 1 and end_line >= start_line")
    end = min(end, len(lines))
    capped = min(end, start + MAX_LINES_PER_READ - 1)
    chunk = "".join(lines[start - 1 : capped])
    return Excerpt(chunk, f"lines {start}-{capped} of {len(lines)}", len(lines), truncated=capped < end)


def read_bytes(text: str, start_byte: int | None, end_byte: int | None) -> Excerpt:
    """Bytes start..end (0-based, end exclusive) of the UTF-8 text, at most MAX_BYTES_PER_READ."""
    data = text.encode()
    start = start_byte or 0
    end = len(data) if end_byte is None else min(end_byte, len(data))
    if start < 0 or end < start:
        raise BadRead("start_byte must be >= 0 and end_byte >= start_byte")
    capped = min(end, start + MAX_BYTES_PER_READ)
    chunk = data[start:capped].decode(errors="replace")
    return Excerpt(
        chunk, f"bytes {start}-{capped} of {len(data)}", text.count("\n") + 1, truncated=capped < end
    )


def grep(text: str, pattern: str, max_matches: int = 50, context_lines: int = 0) -> Excerpt:
    """Lines matching `pattern` (RE2 syntax), numbered, with optional context lines."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise BadRead(f"pattern must be 1-{MAX_PATTERN_CHARS} characters")
    try:
        regex = re2.compile(pattern)
    except re2.error as exc:
        raise BadRead(f"pattern is not a valid RE2 regular expression: {exc}") from None
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if regex.search(line)]
    shown = hits[: max(1, max_matches)]
    wanted = sorted(
        {j for i in shown for j in range(max(0, i - context_lines), min(len(lines), i + context_lines + 1))}
    )
    out = "\n".join(f"{j + 1}: {lines[j]}" for j in wanted)
    return Excerpt(
        out, f"grep {pattern!r}: {len(hits)} matching lines", len(lines), truncated=len(hits) > len(shown)
    )
