"""Reading bytes line by line around hits: the windows a line-oriented pass reads, and its spans
mapped back to byte offsets (the config positions and the generic layer read text this way).

A line longer than `LONG_LINE` (a JSONL record, minified code) is read around each hit only, in
parts of at most `_LONGEST_PART`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

Span = tuple[str, int, int]

LONG_LINE = 4_096
_BEFORE, _AFTER = 512, 1_024
# the parts of a long line around nearby hits join up to this size, then overlap: one part per
# hit's neighbourhood, not the whole line once the hits are dense (`a.key=b` * 11,111: 75 KB read
# once per hit, 260 s); what two parts both find is merged by the caller
_LONGEST_PART = 2 * (_BEFORE + _AFTER)


def decode(raw: bytes) -> str:
    """UTF-8 text of raw; latin-1 where it is not UTF-8 (one character per byte)."""
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw.decode("latin-1")  # one character per byte: the offsets are the bytes'


def to_bytes(text: str, raw: bytes, base: int, spans: Iterable[Span]) -> list[Span]:
    """str spans of text (the decoding of raw, at byte base) as byte spans of the whole data."""
    if len(text) == len(raw):
        return [(k, base + s, base + e) for k, s, e in spans]
    size = lambda t: len(t.encode("utf-8", "surrogatepass"))  # noqa: E731
    return [(k, base + size(text[:s]), base + size(text[:e])) for k, s, e in spans]


def lines_from(text: str, pos: int, limit: int) -> Iterator[tuple[int, int, str]]:
    """(start, end, line) of each line of text from pos on, `limit` lines at most (a reader of the
    lines below a header, a template or a block key; the caller stops when they end)."""
    for _ in range(limit):
        if pos >= len(text):
            return
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        yield pos, end, text[pos:end]
        pos = end + 1


def windows(data: bytes, starts: Iterable[int]) -> list[tuple[int, int, bool]]:
    """(start, end, whole line) of the line around each position; a long line's part around it."""
    out: list[tuple[int, int, bool]] = []
    for at in starts:
        if out and at < out[-1][1]:
            continue
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        whole = end - start <= LONG_LINE
        if not whole:
            start, end = max(start, at - _BEFORE), min(end, at + _AFTER)
            while start < at and data[start] & 0xC0 == 0x80:
                start += 1  # not inside a character
            while end < len(data) and data[end] & 0xC0 == 0x80:
                end += 1
        if out and start < out[-1][1] and (whole or end - out[-1][0] <= _LONGEST_PART):
            out[-1] = (out[-1][0], max(end, out[-1][1]), out[-1][2] and whole)
        else:
            out.append((start, end, whole))
    return out


def scan_windows(
    data: bytes, windows: list[tuple[int, int, bool]], read: Callable[[str, bool], Iterable[Span]]
) -> list[Span]:
    """Byte spans of what read finds in each window's text (read gets the text and whether it
    is a whole line)."""
    found: list[Span] = []
    for start, end, whole in windows:
        raw = data[start:end]
        text = decode(raw)
        spans = list(read(text, whole))
        if spans:
            found += to_bytes(text, raw, start, spans)
    return found
