"""RE2 searches over bytes without the wrapper's generator and match objects.

google-re2's `search` and `finditer` build a generator and a match object per call and per match:
on the scanner's hot path (every part of every lane, the keyword and base64 passes, for every text)
that wrapper cost more than RE2's own search of a short text. These call RE2's `Match` directly
and return offsets; tests/unit/test_re2_search.py holds them to the wrapper's answers.
"""

from __future__ import annotations

import re2

_UNANCHORED = re2._Anchor.UNANCHORED
_ANCHOR_START = re2._Anchor.ANCHOR_START
Span = tuple[int, int]


def leftmost(regex: re2._Regexp, data: bytes, pos: int = 0, end: int | None = None) -> int | None:
    """Where regex first matches in data at or after pos (None: nowhere), as `regex.search(data,
    pos).start()`; with end, among the matches that end there at the latest."""
    start: int = regex._regexp.Match(_UNANCHORED, data, pos, len(data) if end is None else end)[0][0]
    return None if start < 0 else start


def match_spans(regex: re2._Regexp, data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every match, left to right, as `[m.span() for m in regex.finditer(data)]`,
    for a regex that never matches the empty string."""
    search, end = regex._regexp.Match, len(data)
    out: list[tuple[int, int]] = []
    pos = 0
    while pos <= end:
        start, stop = search(_UNANCHORED, data, pos, end)[0]
        if start < 0:
            break
        out.append((start, stop))
        pos = stop if stop > start else stop + 1
    return out


def match_at(regex: re2._Regexp, data: bytes, pos: int, end: int | None = None) -> list[Span] | None:
    """The span of every group (group 0 first; (-1, -1) where a group took no part) of a match
    that starts at pos, as `regex.match(data, pos)`'s `span(i)`; None where none starts there.
    With end, the match ends there at the latest (`\\b` and `$` still see the bytes after it)."""
    spans: list[Span] = regex._regexp.Match(_ANCHOR_START, data, pos, len(data) if end is None else end)
    return None if spans[0][0] < 0 else spans


def group(data: bytes, span: Span) -> bytes | None:
    """The bytes of a group's span, as a match's `group(i)`: None for a group that took no part."""
    return None if span == (-1, -1) else data[span[0] : span[1]]
