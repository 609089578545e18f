"""What every match of a pattern holds: a few literal strings, one of which is in any text it matches.

A lane of detectors that a text cannot match is skipped with one cheap search: if none of the
strings its detectors need occurs in the text (ASCII case ignored, as RE2's `(?i)` ignores it),
none of them matches, and the lane's DFA passes (a few per lane) are not run. Most transcript
text names no credential (`pass`, `token`, `key`, `auth`, …) and half of it has no `=`.

`required(pattern)` reads the pattern's syntax tree (Python's parser: these patterns are in the
syntax RE2 and `re` share) and keeps only what is sure: a run of literal characters in a sequence,
the strings of every branch of an alternation, a group or a repeat of at least one. Anything it
does not know (a class, an optional part, a pattern `re` cannot parse) needs nothing, so a lane
with such a detector has no prefilter: the answer is a superset, never a guess.
"""

from __future__ import annotations

import re
import re._parser as sre  # type: ignore[import-not-found]
from collections.abc import Iterable
from typing import Any

import re2

Needs = frozenset[str] | None  # a text any match lies in holds one of these (None: nothing known)

_LITERAL, _IN, _BRANCH, _SUBPATTERN = sre.LITERAL, sre.IN, sre.BRANCH, sre.SUBPATTERN
_AT, _AT_BOUNDARY = sre.AT, sre.AT_BOUNDARY
# `\b` inside a run of literals (`pw\b`, `pat\b`): kept, as RE2 reads it at the same place
_BOUNDARY = "\ue000"
# a run's strings are joined while they are at most this many (then the run is cut there)
_MOST_STRINGS = 64
# the most strings a lane's prefilter looks for
PREFILTER_STRINGS = 64
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT))


def _ascii(code: int) -> str | None:
    return chr(code) if code < 0x80 else None


def _literal_length(needle: str) -> int:
    return len(needle.replace(_BOUNDARY, ""))


def _best(candidates: Iterable[frozenset[str]]) -> Needs:
    """The most telling of several sufficient answers: the longest shortest string, then the
    longest strings in all, then the fewest."""
    return max(
        (c for c in candidates if min(map(_literal_length, c)) > 0),
        key=lambda n: (min(map(_literal_length, n)), sum(map(_literal_length, n)), -len(n)),
        default=None,
    )


def _exact(op: Any, value: Any) -> frozenset[str] | None:
    """The strings an item matches when they are few and literal (`(?i:pass|pwd)`, `[\"']`, `\b`)."""
    if op is _LITERAL:
        char = _ascii(value)
        return frozenset([char]) if char is not None else None
    if op is _AT:
        return frozenset([_BOUNDARY]) if value is _AT_BOUNDARY else None
    if op is _IN:
        chars = [_ascii(v) if o is _LITERAL else None for o, v in value]
        return frozenset(c for c in chars if c is not None) if chars and None not in chars else None
    if op is _SUBPATTERN:
        return _exact_sequence(list(value[-1]))
    if op is _BRANCH:
        branches = [_exact_sequence(list(b)) for b in value[1]]
        return None if None in branches else frozenset().union(*(b for b in branches if b is not None))
    if op in _REPEATS and value[0] == value[1] == 1:
        return _exact_sequence(list(value[2]))
    return None


def _joined(left: frozenset[str], right: frozenset[str]) -> frozenset[str] | None:
    joined = frozenset(a + b for a in left for b in right)
    return joined if len(joined) <= _MOST_STRINGS else None


def _exact_sequence(items: list[tuple[Any, Any]]) -> frozenset[str] | None:
    out: frozenset[str] | None = frozenset([""])
    for op, value in items:
        strings = _exact(op, value)
        out = None if strings is None or out is None else _joined(out, strings)
        if out is None:
            return None
    return out


def _item(op: Any, value: Any) -> Needs:
    """What every match of one item holds (an item with few literal strings is handled by the caller)."""
    if op is _SUBPATTERN:
        return _sequence(list(value[-1]))
    if op in _REPEATS:
        low, _high, inner = value
        return _sequence(list(inner)) if low >= 1 else None
    if op is _BRANCH:
        branches = [_sequence(list(b)) for b in value[1]]
        if not branches or any(b is None for b in branches):
            return None
        return frozenset().union(*(b for b in branches if b is not None))
    return None  # anchors, categories, classes of ranges, anything else: no character to count on


def _sequence(items: list[tuple[Any, Any]]) -> Needs:
    """One of the sequence's sure answers: a run of items with few literal strings, joined (`p` and
    `(?:ass|wd)` is `pass` or `pwd`), or one other item's answer."""
    candidates: list[frozenset[str]] = []
    run: frozenset[str] = frozenset([""])
    for op, value in [*items, (None, None)]:
        strings = _exact(op, value) if op is not None else None
        joined = _joined(run, strings) if strings is not None else None
        if joined is not None:
            run = joined
            continue
        candidates.append(run)
        run = strings if strings is not None else frozenset([""])
        found = _item(op, value) if op is not None and strings is None else None
        if found:
            candidates.append(found)
    return _best(candidates)


# RE2 syntax that Python's parser reads otherwise: a POSIX class (`[[:alpha:]]`, for `re` a class
# of `[`, `:`, `a`, … and then a literal `]`)
_RE2_ONLY = re.compile(r"\[:\^?[a-z]+:\]")


def required(pattern: str) -> Needs:
    """Strings one of which (ASCII case ignored) every match of pattern holds; None: not known."""
    if _RE2_ONLY.search(pattern):
        return None
    try:
        tree = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    needs = _sequence(list(tree))
    return frozenset(s.lower() for s in needs) if needs else None


def _regex_char(char: str) -> str:
    if char == _BOUNDARY:
        return "\\b"
    return char if char.isalnum() else f"\\x{ord(char):02x}"


def prefilter(patterns: Iterable[str], options: re2.Options) -> re2._Regexp | None:
    """An RE2 regex that matches somewhere in every text any of patterns matches in, or None when
    one of them needs nothing known, or when they need more than PREFILTER_STRINGS strings (a
    search for so many, single characters among them, costs nearly what the lane does and finds
    one in almost any text). Compiled with the patterns' own options, so `(?i)` folds case as
    theirs does (the Kelvin sign is a `k`)."""
    strings: set[str] = set()
    for pattern in patterns:
        needs = required(pattern)
        if needs is None:
            return None
        strings |= needs
    if len(strings) > PREFILTER_STRINGS:
        return None
    alternatives = "|".join("".join(map(_regex_char, s)) for s in sorted(strings))
    return re2.compile(f"(?i:{alternatives})".encode(), options)
