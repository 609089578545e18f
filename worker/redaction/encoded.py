"""Secrets hidden by an encoding: a decoded view of the text is scanned with the same rules.

Percent escapes (`%3D`, `%22`) and JSON string escapes (`\\"`, `\\n`) hide the `=`, quotes and
line breaks that many rules need as context, so a secret the plain text would give away passes the
scan of the encoded text. Each decoding is applied to the lines that hold an escape of its kind,
whole (a JSON-escaped file keeps its spaces, so a token alone would lose the `key = ` in front of a
value; a long line is read around its escapes, as lines.py reads it); the decoded bytes are scanned
with `find_spans`, and a secret found there is mapped back to the encoded token that carries it: the
run of non-space bytes around it that holds an escape of that kind. The whole token is replaced,
since the escapes inside it make a byte-exact cut between secret and context guesswork. Lines with
no escape are not scanned again: what they hold the plain scan saw.

Base64 runs need nothing here: `find_spans` already scans the text they decode to.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import re2

from worker.redaction.lines import windows
from worker.redaction.scanner import Span, uncovered
from worker.redaction.search import leftmost

__all__ = ["EncodedSecret", "encoded_secrets", "may_hide_secrets"]

_PERCENT = re.compile(rb"%[0-9A-Fa-f]{2}")
# `\uXXXX` first; any other backslash pair is the escaped character (`\n`, `\"`, `\/`, `\\`)
# `%ADMIN_PW%`, a cmd variable: a name with a letter past `F` (`%C3%A9` is two escapes)
_WINDOWS_VARIABLE = re.compile(rb"%(?=[A-Za-z0-9_]*[G-Zg-z_])[A-Za-z_][A-Za-z0-9_]{1,63}%")
_JSON_ESCAPE = re.compile(rb"\\u[0-9A-Fa-f]{4}|\\[\"\\/bfnrt]")
_JSON_SIMPLE = {
    b'"': b'"',
    b"\\": b"\\",
    b"/": b"/",
    b"b": b"\b",
    b"f": b"\f",
    b"n": b"\n",
    b"r": b"\r",
    b"t": b"\t",
}
# a URL's user:password part, where `%40` is a literal `@` of the password, not a delimiter
_USERINFO = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@]*@")
_ALNUM = re.compile(rb"[A-Za-z0-9]")
_SPACE = frozenset(b" \t\r\n\f\v")
# the hot-path test: a text with none of these has no escapes to decode (RE2: one DFA pass, where
# Python's re took ~2.5x as long over a text with a `%` or a backslash and no escape)
_HINT = re2.compile(rb"%[0-9A-Fa-f]{2}|\\[\"\\/bfnrtu]")


@dataclass(frozen=True, slots=True)
class EncodedSecret:
    """An encoded token at data[start:end] that decodes to text holding a secret of `kind`."""

    kind: str
    start: int
    end: int
    secret: bytes  # the decoded secret, what the placeholder's HMAC is taken over


@dataclass(frozen=True, slots=True)
class _View:
    """Decoded bytes and where each piece came from: (decoded start, encoded start, encoded length,
    whether the piece is an escape) per piece, in order."""

    decoded: bytes
    pieces: list[tuple[int, int, int, bool]]
    escape: re.Pattern[bytes]

    def encoded_start(self, at: int) -> int:
        """The encoded offset of decoded byte `at` (an escape maps to where it starts)."""
        dec, enc, _size, is_escape = self.pieces[bisect.bisect_right(self.pieces, (at, 1 << 62)) - 1]
        return enc if is_escape else enc + (at - dec)

    def encoded_end(self, at: int) -> int:
        """The encoded offset just past decoded byte `at - 1` (an escape maps to where it ends)."""
        dec, enc, size, is_escape = self.pieces[bisect.bisect_right(self.pieces, (at - 1, 1 << 62)) - 1]
        return enc + size if is_escape else enc + (at - dec)


def may_hide_secrets(data: bytes) -> bool:
    """Whether data holds any escape worth decoding: the one check a plain text pays."""
    return (b"%" in data or b"\\" in data) and leftmost(_HINT, data) is not None


def _json_unescaped(escape: bytes) -> bytes:
    if escape[1:2] != b"u":
        return _JSON_SIMPLE[escape[1:2]]
    # a lone surrogate half stays a surrogate: the bytes only feed the scanner
    return chr(int(escape[2:], 16)).encode("utf-8", "surrogatepass")


def _percent_unescaped(escape: bytes) -> bytes:
    return bytes([int(escape[1:], 16)])


def _view(
    data: bytes,
    escape: re.Pattern[bytes],
    unescape: Callable[[bytes], bytes],
    keep: list[tuple[int, int]],
    window: tuple[int, int],
    quotes_break: bool = False,
) -> _View | None:
    """data[start:end] of the window with every match of `escape` outside the `keep` ranges
    decoded (offsets in data), or None when there is none. quotes_break: an unescaped `"` reads as
    a line break (JSON: each string's text starts and ends a line, as the file it holds did)."""
    out: list[bytes] = []
    pieces: list[tuple[int, int, int, bool]] = []
    dec = 0
    pos, stop = window
    for m in escape.finditer(data, pos, stop):
        if any(a <= m.start() < b for a, b in keep):
            continue
        if m.start() > pos:
            pieces.append((dec, pos, m.start() - pos, False))
            out.append(_plain(data[pos : m.start()], quotes_break))
            dec += m.start() - pos
        plain = unescape(m.group(0))
        pieces.append((dec, m.start(), m.end() - m.start(), True))
        out.append(plain)
        dec += len(plain)
        pos = m.end()
    if not pieces:
        return None
    if pos < stop:
        pieces.append((dec, pos, stop - pos, False))
        out.append(_plain(data[pos:stop], quotes_break))
    return _View(b"".join(out), pieces, escape)


def _plain(chunk: bytes, quotes_break: bool) -> bytes:
    return chunk.replace(b'"', b"\n") if quotes_break else chunk


def _views(data: bytes) -> Iterator[_View]:
    """A decoded view of each window of data (the lines around its escapes) per kind of escape."""
    # decoding inside a URL's userinfo would move where its password ends (`P%40ss@host`)
    userinfo = [m.span() for m in _USERINFO.finditer(data)] if b"://" in data else []
    # nor is `%ADMIN_PW%` an escape (`%AD`): a Windows variable, a reference to a secret
    variables = [m.span() for m in _WINDOWS_VARIABLE.finditer(data)]
    for escape, unescape, keep in (
        (_PERCENT, _percent_unescaped, userinfo + variables),
        (_JSON_ESCAPE, _json_unescaped, []),
    ):
        json = escape is _JSON_ESCAPE
        hits = [m.start() for m in escape.finditer(data) if not any(a <= m.start() < b for a, b in keep)]
        # escapes everywhere (a JSONL file of escaped records): the whole text is one window
        dense = len(hits) * _DENSE_BYTES >= len(data)
        for start, end in [(0, len(data))] if dense and hits else _adjacent_joined(windows(data, hits)):
            view = _view(data, escape, unescape, keep, (start, end), json and _reads_as_json(data, start))
            if view is not None:
                yield view


def _reads_as_json(data: bytes, start: int) -> bool:
    """Whether a window starts as JSON does (`{`, `[` or a `"key"`): then its strings' quotes are
    line breaks in the view (`{"cfg": "port 1\\nrequirepass …"}`: the directive starts a line)."""
    first = _FIRST_BYTE.search(data, start)
    return first is not None and first.group(0) in (b"{", b"[", b'"')


_FIRST_BYTE = re.compile(rb"[^ \t\r\n]")


_DENSE_BYTES = 512


def _adjacent_joined(found: list[tuple[int, int, bool]]) -> list[tuple[int, int]]:
    """Windows that follow one another (line after line of escapes: a JSONL file of escaped
    records) as one: one decoded view, one scan."""
    out: list[tuple[int, int]] = []
    for start, end, _whole in found:
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _token(data: bytes, start: int, end: int, covered: list[Span]) -> tuple[int, int]:
    """The non-space run around data[start:end], stopped short of any span already covered and
    of an unescaped quote (the JSON string the escapes are in ends there: `…\\n"}` keeps `"}`)."""
    lo = max([e for _, _, e in covered if e <= start], default=0)
    hi = min([s for _, s, _ in covered if s >= end], default=len(data))
    while start > lo and data[start - 1] not in _SPACE and not _unescaped_quote(data, start - 1):
        start -= 1
    while end < hi and data[end] not in _SPACE and not _unescaped_quote(data, end):
        end += 1
    return start, end


def _unescaped_quote(data: bytes, at: int) -> bool:
    return data[at] == 0x22 and (at == 0 or data[at - 1] != 0x5C)


def encoded_secrets(
    data: bytes, covered: list[Span], scan: Callable[[bytes], list[Span]]
) -> list[EncodedSecret]:
    """Encoded tokens of data that decode to a secret `scan` finds and no span in covered overlaps,
    left to right and disjoint; the first finding in a token names its kind."""
    found: list[EncodedSecret] = []
    for view in _views(data):
        for kind, a, b in scan(view.decoded):
            # a span already covering part of it (a JWT's payload, found from its own `eyJ`) leaves
            # the rest exposed: each uncovered piece with key material in it goes too
            for start, end in _uncovered(view.encoded_start(a), view.encoded_end(b), data, covered, found):
                token = _token(data, start, end, covered + [(f.kind, f.start, f.end) for f in found])
                # a token with escapes goes whole (a cut between escapes is guesswork); one without
                # maps byte for byte: only the secret (what decoding gave was its context: a line
                # that starts inside a JSON string, `{"out": "htpasswd: |\\n  ops:PASSWORD"}`)
                if view.escape.search(data, *token) is not None:
                    start, end = token
                found.append(EncodedSecret(kind, start, end, view.decoded[a:b]))
    return sorted(found, key=lambda f: f.start)


def _uncovered(
    start: int, end: int, data: bytes, covered: list[Span], found: list[EncodedSecret]
) -> list[tuple[int, int]]:
    """The parts of data[start:end] that no span overlaps and that hold four or more letters or digits."""
    pieces = uncovered(start, end, [(s, e) for _, s, e in covered] + [(f.start, f.end) for f in found])
    return [(s, e) for s, e in pieces if len(_ALNUM.findall(data[s:e])) >= 4]
