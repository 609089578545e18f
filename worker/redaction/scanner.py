"""Finding secrets fast: one RE2 pass over UTF-8 bytes, judges only where a pattern matched.

Then Kingfisher's catalog (kingfisher.py) looks at the same bytes; a span it finds that none of
ours overlaps is added. `Ruleset` is which rules take part: all of them in the service, fewer in
the bench's family-held-out figures (a rule is left out for the families it was tuned on).

Every detector's pattern is one alternative of a single RE2 regex, so a clean text costs one
DFA scan (well over 100 MB/s) whatever the number of detectors; Python runs only at candidate
positions. Encoded forms get a second look through decoded views: percent-encoded runs
(`%2F`, `%40`) and base64 runs that decode to text (a blob hiding `AKIA…` or a PEM key).
JSON-escaped forms (`\\"`, `\\/`, `\\n`) need no view: the patterns accept the escapes.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from urllib.parse import unquote_to_bytes

import re2

from worker.redaction import kingfisher
from worker.redaction.configs import config_spans, disjoint, merged
from worker.redaction.detectors import DETECTORS
from worker.redaction.generic import WIDER, decoded_userinfo, token_spans
from worker.redaction.manifests import kubernetes_secret_spans
from worker.redaction.needs import prefilter
from worker.redaction.rules import VALUE_TRAIL, Detector
from worker.redaction.search import group, leftmost, match_at, match_spans
from worker.redaction.strict import STRICT_DETECTORS


@dataclass(frozen=True, slots=True)
class Finding:
    """A secret of `kind` at text[start:end]."""

    kind: str
    start: int
    end: int


Span = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class _Part:
    """A run of a lane's detectors, in table order: their alternation without capture groups (RE2
    finds a span with its DFA alone: asking for the groups of every detector made it run its NFA
    over each match too), each detector's own pattern for its groups, and RE2 Sets that name the
    detectors matching at a position (anchored there, one byte of context before it so that `\b`
    and `^` read as in the text; `starts_at_0` at the text's start)."""

    regex: re2._Regexp
    detectors: tuple[Detector, ...]
    own: tuple[re2._Regexp, ...]
    starts: re2.Set
    starts_at_0: re2.Set


@dataclass(frozen=True, slots=True)
class _Lane:
    """One pass over a lane's detectors, as if one alternation of them all: the leftmost start any
    of them matches at, then the first detector in table order that matches there, with its own
    match. The alternation is cut into parts so that each part's DFA states stay small: one DFA of
    all of lane 0 (24k instructions) filled its cache and rebuilt it over and over on text dense
    with candidates (~0.7 ms for a 70-byte text, against ~0.1 ms for four parts, cold).
    `needs` finds one of the strings every match of the lane's detectors holds (needs.py): a text
    where it finds none matches no detector of the lane, which is then not searched."""

    parts: tuple[_Part, ...]
    needs: re2._Regexp | None = None


# RE2 instructions per part (the sum of its detectors' program sizes): lane 0 makes 4 parts
_PART_INSTRUCTIONS = 8_000


def _spans_only() -> re2.Options:
    options = re2.Options()
    options.max_mem, options.never_capture = 64 << 20, True
    return options


def _part(detectors: list[Detector]) -> _Part:
    options = re2.Options()
    options.max_mem = 64 << 20
    spans_only = _spans_only()
    starts, starts_at_0 = re2.Set.MatchSet(options), re2.Set.MatchSet(options)
    for detector in detectors:
        starts.Add(rb"\C(?:" + detector.pattern.encode() + b")")
        starts_at_0.Add(detector.pattern.encode())
    starts.Compile()
    starts_at_0.Compile()
    return _Part(
        re2.compile("|".join(f"(?:{d.pattern})" for d in detectors).encode(), spans_only),
        tuple(detectors),
        tuple(re2.compile(d.pattern.encode()) for d in detectors),
        starts,
        starts_at_0,
    )


def _compile(detectors: list[Detector]) -> _Lane:
    runs: list[list[Detector]] = [[]]
    size = 0
    for detector in detectors:
        instructions = re2.compile(detector.pattern).programsize
        if runs[-1] and size + instructions > _PART_INSTRUCTIONS:
            runs.append([])
            size = 0
        runs[-1].append(detector)
        size += instructions
    return _Lane(tuple(_part(run) for run in runs), prefilter([d.pattern for d in detectors], _spans_only()))


def _lanes(detectors: tuple[Detector, ...]) -> tuple[_Lane, ...]:
    return tuple(
        _compile([d for d in detectors if d.lane == lane]) for lane in sorted({d.lane for d in detectors})
    )


# names of rules that are not in the detector table, for Ruleset.without
KUBERNETES_MANIFEST = "kubernetes_manifest"
KEYED_FIELD = "keyed_field"
CONFIG_POSITIONS = "config_positions"
# the generic layer (generic/): credential positions in any line syntax, vendor-style token shapes
GENERIC_POSITIONS = "generic_positions"
GENERIC_TOKENS = "generic_tokens"


@dataclass(frozen=True, slots=True)
class Ruleset:
    """Which rules find secrets: our detectors (as RE2 lanes), the extra passes, Kingfisher's rules."""

    lanes: tuple[_Lane, ...]
    left_out: frozenset[str] = frozenset()
    kingfisher_skip: frozenset[str] = frozenset()
    # the strict profile (strict.py): also references, placeholders and identifiers
    strict: bool = False

    def has(self, name: str) -> bool:
        """Whether the rule named name (a detector name, KUBERNETES_MANIFEST, KEYED_FIELD) takes part."""
        return name not in self.left_out

    @staticmethod
    @cache
    def without(
        names: frozenset[str] = frozenset(), kingfisher_rules: frozenset[str] = frozenset()
    ) -> Ruleset:
        """All rules but the detectors (by name) and Kingfisher rules (by id) listed; cached."""
        kept = tuple(d for d in DETECTORS if d.name not in names)
        return Ruleset(_lanes(kept), names, kingfisher_rules)


ALL = Ruleset.without()


@cache
def strict_rules() -> Ruleset:
    """The strict profile's rules, built on first use (~0.4 s a process that never redacts strictly
    does not pay): the standard lanes as they are, then the strict ones, so a candidate a strict
    judge takes whole (a vendor look-alike running into a URL) cannot hide what a standard lane
    finds inside it."""
    return Ruleset(ALL.lanes + _lanes(STRICT_DETECTORS), strict=True)


_PLACEHOLDER = re2.compile(rb"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]")
_PERCENT_RUN = re2.compile(rb"[^\s\"'<>`]*%[0-9A-Fa-f]{2}[^\s\"'<>`]*")
_BASE64_RUN = re2.compile(rb"[A-Za-z0-9+/]{24,}={0,2}|[A-Za-z0-9_-]{24,}={0,2}")
# strict: shorter runs too (a 12-character placeholder or an IP address encodes to 16-20)
_BASE64_RUN_STRICT = re2.compile(rb"[A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9_-]{16,}={0,2}")
_PRINTABLE = re.compile(rb"[\x20-\x7e\t\r\n]*")
_VIEW_MAX_BYTES = 1 << 20


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _byte_offset(region: str, raw: bytes, index: int) -> int:
    if len(region) == len(raw):
        return index
    return len(region[:index].encode("utf-8", "surrogatepass"))


def _next_start(lane: _Lane, data: bytes, pos: int, starts: list[int | None]) -> int | None:
    """The leftmost position at or after pos where a detector of the lane matches. starts[i] is
    part i's leftmost start from an earlier pos (-1: not searched yet), still its answer while
    it is not before pos; None: the part matches nowhere after that."""
    best = None
    for i, part in enumerate(lane.parts):
        at = starts[i]
        if at is not None and at < pos:
            at = starts[i] = _leftmost_near(part.regex, data, pos)
        if at is not None and (best is None or at < best):
            best = at
    return best


def _leftmost_near(regex: re2._Regexp, data: bytes, pos: int) -> int | None:
    """leftmost(regex, data, pos), read first to _NEAR bytes past pos: RE2 finds a match's start by
    running to its end, and a value runs to the next blank, so in one long blank-free run of keys
    every search would read the rest of the run. A start found in the first _NEAR - _LONGEST bytes
    is the leftmost for every match up to _LONGEST bytes long; otherwise the whole rest is read."""
    end = pos + _NEAR
    if end < len(data):
        at = leftmost(regex, data, pos, end)
        if at is not None and at < end - _LONGEST:
            return at
    return leftmost(regex, data, pos)


_NEAR, _LONGEST = 32_768, 16_384  # _LONGEST: an RSA-16384 key block is 12.6 KB


def _detector_at(
    lane: _Lane, data: bytes, start: int, starts: list[int | None], reach: int | None
) -> tuple[Detector, re2._Regexp, list[tuple[int, int]]]:
    """The first detector in table order that matches at start (the leftmost start of the lane's
    parts) within reach (None: anywhere), its own regex and the spans of its match's groups there."""
    view = memoryview(data)
    for at, part in zip(starts, lane.parts, strict=True):
        if at != start:
            continue
        # the Set reads to the reach too: it names every detector whose match ends by then (and may
        # name one whose `$` or `\b` holds only at the cut: its own match then finds none)
        named = part.starts.Match(view[start - 1 : reach]) if start else part.starts_at_0.Match(view[:reach])
        # none named: the Set ran out of memory (it says so no other way): every detector is asked
        for i in sorted(named) if named else range(len(part.detectors)):
            spans = match_at(part.own[i], data, start, reach)
            if spans is not None:
                return part.detectors[i], part.own[i], spans
    if reach is not None:
        return _detector_at(lane, data, start, starts, None)  # only a match longer than the reach
    raise AssertionError(f"no detector of the lane matches at {start}")


def _reach(start: int, size: int) -> int | None:
    """Where a match starting at start is read to at first (None: the end). A value runs to the
    next blank, so in one long blank-free run every `key=` would read, and judge, the rest of the
    run again (`a.key=b` * 11,111: 260 s). A match the reach cuts is read whole while the text's
    budget (its size and _WHOLE_BUDGET) lasts, so an ordinary text is read as with no reach; past
    the budget it is judged by its head and, if a secret, redacted to the end of its whole match."""
    return start + _MATCH_REACH if start + _MATCH_REACH < size else None


_MATCH_REACH = 256
_WHOLE_BUDGET = 65_536
# a secret that ends this close to the reach may run on past it: a pattern may end a match a few
# characters before the cut (`\r\n` escapes in a key block), the judges trim no more than a few
# closing characters (quotes, `,;)`, backslashes), which is what the longer match is trimmed of
_CUT_SLACK = 8


def _outside_placeholders(data: bytes, found: list[Span]) -> list[Span]:
    """found without spans inside a placeholder, which reads like `kind:hex`, an assignment."""
    if not found or b"[REDACTED:" not in data:
        return found
    marks = [m.span() for m in _PLACEHOLDER.finditer(data)]  # disjoint, in order
    ends = [e for _, e in marks]
    out = []
    for f in found:
        i = bisect.bisect_right(ends, f[1])  # the first placeholder ending after the span starts
        if i == len(marks) or marks[i][0] >= f[2]:
            out.append(f)
    return out


def scan_bytes(data: bytes, rules: Ruleset = ALL) -> list[Span]:
    """(kind, start, end) byte spans of every pattern-detected secret, left to right, disjoint."""
    found = _outside_placeholders(data, [span for lane in rules.lanes for span in _scan_lane(lane, data)])
    if len(rules.lanes) == 1 or not found:
        return found
    out: list[Span] = []
    # earliest first; at one position the longer span, then the lower lane (stable sort)
    for span in sorted(found, key=lambda s: (s[1], s[1] - s[2])):
        if not out or span[1] >= out[-1][2]:
            out.append(span)
        elif rules.strict and span[2] > out[-1][2]:
            # strict: overlapping spans become one, so nothing a lane found is left out
            out[-1] = (out[-1][0], out[-1][1], span[2])
    return out


def _scan_lane(lane: _Lane, data: bytes) -> list[Span]:
    out: list[Span] = []
    if lane.needs is not None and leftmost(lane.needs, data) is None:
        return out  # no string a detector of the lane needs: none matches
    pos, size = 0, len(data)
    budget = size + _WHOLE_BUDGET  # bytes of matches cut by the reach that are still read whole
    starts: list[int | None] = [-1] * len(lane.parts)
    while pos < size:
        start = _next_start(lane, data, pos, starts)
        if start is None:
            break
        reach = _reach(start, size)
        detector, regex, spans = _detector_at(lane, data, start, starts, reach)
        # cut: the match ran to the reach, or it spans lines (a block value, a key block: its
        # next line may not have fitted) and so may run on
        cut = reach is not None and (spans[0][1] >= reach - _CUT_SLACK or b"\n" in data[start : spans[0][1]])
        if cut and budget > 0:
            # the match may run on past the reach: read it whole, as if there were none
            detector, regex, spans = _detector_at(lane, data, start, starts, None)
            budget -= spans[0][1] - start
            cut = False
        s_start, s_end = spans[detector.secret_group]
        key = None if detector.key_group is None else _decode(group(data, spans[detector.key_group]))  # type: ignore[arg-type]
        raw = data[s_start:s_end]
        region = _decode(raw)
        judged = detector.judge(region, key)
        if judged is None or judged[2] <= judged[1]:
            # skip past a rejected key but still look inside its value for other secrets
            pos = s_start if detector.key_group is not None and s_start > start else start + 1
            continue
        kind, lo, hi = judged
        if cut and hi >= len(region) - _CUT_SLACK:
            # the budget is spent: judged by its head, the secret runs on to the end of its match
            whole_end = match_at(regex, data, start)[detector.secret_group][1]  # type: ignore[index]
            if whole_end > s_end:
                raw = data[s_start:whole_end]
                region = _decode(raw)
                hi = len(region.rstrip(VALUE_TRAIL))
        first = start
        start, end = s_start + _byte_offset(region, raw, lo), s_start + _byte_offset(region, raw, hi)
        out.append((kind, start, end))
        pos = max(end, first + 1)
    return out


def _percent_views(data: bytes) -> Iterator[tuple[int, int, bytes, list[int]]]:
    """(run start, run end, decoded bytes, offset of each decoded byte in the run) per percent run,
    and per query value in it: a value is a document of its own (`?file=user%20%3D%20x%0A…`,
    whose first line starts at the value, not at the URL)."""
    for m in _PERCENT_RUN.finditer(data):
        run = m.group(0)
        if len(run) > _VIEW_MAX_BYTES:
            continue
        yield m.start(), m.end(), *_percent_decoded(run)
        for q in _QUERY_VALUE.finditer(run):
            if b"%" in q.group(1):
                yield m.start() + q.start(1), m.start() + q.end(1), *_percent_decoded(q.group(1))


_QUERY_VALUE = re.compile(rb"(?:\A|[?&;])[^=&#?;]*=([^&#;]+)")


def _percent_decoded(run: bytes) -> tuple[bytes, list[int]]:
    decoded, where, i = bytearray(), [], 0
    while i < len(run):
        if run[i] == 0x25 and i + 2 < len(run) and _is_hex(run[i + 1 : i + 3]):
            decoded += unquote_to_bytes(run[i : i + 3])
            where.append(i)
            i += 3
        else:
            decoded.append(run[i])
            where.append(i)
            i += 1
    where.append(len(run))
    return bytes(decoded), where


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair)


def _base64_text(run: bytes) -> bytes | None:
    if run.lower() == run or run.upper() == run or len(run) > _VIEW_MAX_BYTES:
        return None
    body = run.rstrip(b"=")
    padded = body + b"=" * (-len(body) % 4)
    try:
        decoded = (base64.urlsafe_b64decode if b"-" in run or b"_" in run else base64.b64decode)(padded)
    except (binascii.Error, ValueError):
        return None
    return decoded if len(decoded) >= 12 and _is_text(decoded) else None


def _is_text(decoded: bytes) -> bool:
    """Printable text, ASCII or UTF-8 (`¿`, `────`): random bytes are almost never either."""
    if decoded.isascii():
        return _PRINTABLE.fullmatch(decoded) is not None
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return text.translate(_LINE_SPACE).isprintable()


_LINE_SPACE = {9: None, 10: None, 13: None}


def _overlaps(spans: list[Span], start: int, end: int) -> bool:
    return any(s < end and start < e for _, s, e in spans)


_ALNUM = re.compile(rb"[A-Za-z0-9]")


_SEPARATORS = frozenset(b":@/ \t\r\n\"'=;,")


def _continues(data: bytes, a: int, b: int) -> bool:
    """Whether data[a:b] runs on from a covered neighbour without a separator between them."""
    inner = data[a:b]
    return bool(inner) and inner[0] not in _SEPARATORS and inner[-1] not in _SEPARATORS


def uncovered(start: int, end: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [start, end) that no (start, end) range in covered overlaps (in position order)."""
    pieces, pos = [], start
    for s, e in sorted(c for c in covered if c[0] < end and start < c[1]):
        if s > pos:
            pieces.append((pos, s))
        pos = max(pos, e)
    if pos < end:
        pieces.append((pos, end))
    return pieces


def find_spans(data: bytes, rules: Ruleset = ALL, depth: int = 1) -> list[Span]:
    """Byte spans of all secrets: patterns, percent-decoded and base64-decoded views, Kingfisher."""
    spans = scan_bytes(data, rules)
    formats, generic = rules.has(CONFIG_POSITIONS), rules.has(GENERIC_POSITIONS)
    if formats or generic:
        # credentials where config files put them (configs/), and in any line syntax (generic/):
        # one pass over the lines that name a credential
        found = config_spans(data, formats=formats, wider=WIDER if generic else None)
        spans = merged(spans, _outside_placeholders(data, found))
    extra: list[Span] = []
    manifests = kubernetes_secret_spans(data) if rules.has(KUBERNETES_MANIFEST) else []
    for kind, start, end in manifests:
        if not _overlaps(spans, start, end):
            extra.append((kind, start, end))
    for kind, start, end in _outside_placeholders(data, kingfisher.spans(data, rules.kingfisher_skip)):
        # where ours cover part of it and cut a token short, the rest of that token goes too
        # (a part behind a separator is another field: the user of `user:pass`, a host)
        pieces = uncovered(start, end, [(a, b) for _, a, b in spans + extra])
        if pieces == [(start, end)]:
            extra.append((kind, start, end))
            continue
        for a, b in pieces:
            if (a == start or b == end) and _continues(data, a, b) and len(_ALNUM.findall(data[a:b])) >= 4:
                extra.append((kind, a, b))
    if rules.has(GENERIC_TOKENS):
        # after Kingfisher, whose vendor names say more than `token`; under strict a token that runs
        # past what a rule found is merged with it (strict takes all that standard takes)
        for kind, start, end in _outside_placeholders(data, list(token_spans(data))):
            if rules.strict or not (_overlaps(spans, start, end) or _overlaps(extra, start, end)):
                extra.append((kind, start, end))
    if b"%" in data:
        for run_start, _, decoded, where in _percent_views(data):
            for kind, a, b in scan_bytes(decoded, rules):
                start, end = run_start + where[a], run_start + where[b]
                if not _overlaps(spans, start, end) and not _overlaps(extra, start, end):
                    extra.append((kind, start, end))
    # a base64 run is 16 or more characters
    if depth > 0 and len(data) >= 16:
        for start, end in match_spans(_BASE64_RUN_STRICT if rules.strict else _BASE64_RUN, data):
            if _overlaps(spans, start, end) or _overlaps(extra, start, end):
                continue
            text = _base64_text(data[start:end])
            inner = find_spans(text, rules, depth - 1) if text is not None else []
            if inner:
                extra.append((inner[0][0], start, end))
            elif text is not None and rules.has(GENERIC_POSITIONS) and decoded_userinfo(text):
                extra.append(("basic_auth", start, end))  # `user:password`, base64: Basic auth
    if not extra:
        return spans
    found = sorted(spans + extra, key=lambda s: s[1])
    return disjoint(found) if rules.strict else found


def find(text: str, rules: Ruleset = ALL) -> list[Finding]:
    """Every secret in text as (kind, start, end) in str offsets, left to right, disjoint."""
    data = text.encode("utf-8", "surrogatepass")
    spans = find_spans(data, rules)
    if not spans or len(data) == len(text):
        return [Finding(k, s, e) for k, s, e in spans]
    return [Finding(k, len(_decode(data[:s])), len(_decode(data[:e]))) for k, s, e in spans]
