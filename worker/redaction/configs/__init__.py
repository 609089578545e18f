"""Credential positions in configuration files, by each format's own structure (issue 25).

A coding agent meets most credentials by reading a config file (`cat .env`, `Read wp-config.php`).
There a value is a credential because of where it sits, whatever it looks like: `admin` under
`DB_PASSWORD=` is as secret as a random token. Only a visible reference or placeholder is left
(`${VAR}`, `$VAR`, `%(name)s`, `{{ x }}`, `<password>`, `****`, `xxxx`, empty). One small module
per family of syntax:

    names.py      which keys hold credentials (`*_PASSWORD`, `secret_key_base`, not `*_KEY_ID`,
                  `*_PATH`, public keys) and which values are only stand-ins (`spared`)
    pairs.py      key/value pairs: dotenv, shell, INI, TOML, YAML, properties, JSON, PHP, Python,
                  Ruby, Elixir, Erlang, JS, Java, XML attributes, libpq; rc files' `password x`
    markup.py     XML elements and name/value entries, base64 or CDATA values
    oneliners.py  pgpass, htpasswd, sasl_passwd, URLs whose password holds `#@!`, .npmrc auth,
                  bare key files
    sections.py   sections whose every entry is one (composer's `github-oauth`, NuGet `<apikeys>`,
                  a Kubernetes Secret's `stringData:`)

`config_spans(data)` is one pass of the scanner (scanner.find_spans, rule CONFIG_POSITIONS; the
generic layer's line readers run in the same pass over the same lines, `Wider`); its
spans win over a shorter one a pattern found inside them (`postgres://u:p#ss@h`: the whole
password, not `p`). The text is scanned line by line, not parsed: a tool result is a numbered
piece of a file, a diff, a grep hit or several files at once, which no parser takes whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

import re2

from worker.redaction.configs.markup import element_spans
from worker.redaction.configs.names import credential_kind
from worker.redaction.configs.oneliners import KEY_FILE_NAMES, key_file_spans, line_spans, npmrc_spans
from worker.redaction.configs.pairs import line_pairs, spaced_pairs
from worker.redaction.configs.sections import section_spans
from worker.redaction.lines import decode, scan_windows, to_bytes, windows
from worker.redaction.search import leftmost, match_spans

Span = tuple[str, int, int]

# a line worth reading: it names a credential (the rest is skipped without a look); one RE2 pass
_KEYWORD = re2.compile(rb"(?i)pass|pwd|pw\b|secret|token|key|salt|cred|auth")
# lines of the one-line formats, which name no credential: pgpass, htpasswd, sasl_passwd, and
# URLs with a password
_NUMBERED = rb"[ \t]*(?:[0-9]+(?:\xe2\x86\x92|\t)[ \t]*)?"
_ONE_LINE = re2.compile(
    rb"(?m)^"
    + _NUMBERED
    + rb"(?:[^\s:]+:(?:[0-9]{1,5}|\*):|[\w.@-]{1,64}:(?:\$apr1\$|\$2[abxy]\$|\{SHA\}|\$[156]\$|\$y\$)"
    rb"|(?:\[[\w.-]+\](?::[0-9]+)?|[\w.-]+:[0-9]+)[ \t]+[^\s:]+:)|://[^\s:/@'\"<>]*:[^\s'\"<>]+@"
)
_SECTIONS = (
    b'"github-oauth"',
    b'"gitlab-oauth"',
    b'"gitlab-token"',
    b'"bitbucket-oauth"',
    b"<apikeys>",
    b"stringData:",
    b"LoginModule",
    b"[users]",
)
_MARKERS = re2.compile(b"|".join(re2.escape(m) for m in (*KEY_FILE_NAMES, *_SECTIONS)))


@dataclass(frozen=True, slots=True)
class Wider:
    """A wider reading of the same lines, in the same pass (the generic layer, generic/): more
    keywords mark a line, more names name a credential, and more readers read it."""

    keyword: re2._Regexp
    kind_of: Callable[[str], tuple[str, bool] | None]
    line: Callable[[str, bool], Iterable[Span]]
    whole: Callable[[bytes, bool], list[Span]]  # the data, and whether a keyword marked a line


def _keyword_line(text: str, whole: bool, formats: bool = True, wider: Wider | None = None) -> Iterable[Span]:
    kind_of = wider.kind_of if wider is not None else credential_kind
    yield from line_pairs(text, line_start=whole, kind_of=kind_of)
    if formats and whole:
        yield from spaced_pairs(text)
    if "<" in text:
        yield from element_spans(text, kind_of=kind_of)
    if formats and ("_auth" in text or "_password" in text):
        yield from npmrc_spans(text)
    if wider is not None:
        yield from wider.line(text, whole)


def config_spans(data: bytes, formats: bool = True, wider: Wider | None = None) -> list[Span]:
    """(kind, start, end) byte spans of every credential in a config position, sorted, disjoint.
    formats: the formats' own rules take part (the one-line formats, rc files, npmrc, key files,
    sections); wider: the generic layer reads the same lines in the same pass (its names replace
    the formats' own, which they include)."""
    found: list[Span] = []
    hits = [start for start, _ in match_spans(wider.keyword if wider else _KEYWORD, data)]
    if hits:
        read = partial(_keyword_line, formats=formats, wider=wider)
        found += scan_windows(data, windows(data, hits), read)
    if wider is not None:
        found += wider.whole(data, bool(hits))
    if not formats:
        return disjoint(found)
    ones = [start for start, _ in match_spans(_ONE_LINE, data)] if b":" in data else []
    if ones:
        found += scan_windows(data, windows(data, ones), lambda text, whole: line_spans(text))
    marked = leftmost(_MARKERS, data) is not None if hits else False
    if marked and any(name in data for name in KEY_FILE_NAMES):
        found += key_file_spans(data, decode)
    if marked and any(marker in data for marker in _SECTIONS):
        text = decode(data)
        found += to_bytes(text, data, 0, section_spans(text))
    return disjoint(found)


def config_text_spans(text: str) -> list[Span]:
    """config_spans of a str, in str offsets (for tests and tools)."""
    data = text.encode("utf-8", "surrogatepass")
    spans = config_spans(data)
    return [(k, len(decode(data[:s])), len(decode(data[:e]))) for k, s, e in spans]


def disjoint(spans: list[Span]) -> list[Span]:
    """spans sorted, overlapping ones merged (the first one's kind)."""
    out: list[Span] = []
    for kind, start, end in sorted((s for s in spans if s[2] > s[1]), key=lambda s: (s[1], -s[2])):
        if out and start < out[-1][2]:
            if end > out[-1][2]:
                out[-1] = (out[-1][0], out[-1][1], end)
            continue
        out.append((kind, start, end))
    return out


def merged(spans: list[Span], configs: list[Span]) -> list[Span]:
    """The scanner's spans with the config spans added: one that overlaps others takes them in
    (the whole value where a pattern stopped short), sorted and disjoint."""
    return disjoint(spans + configs) if configs else spans
