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

`config_spans(data)` is one pass of the scanner (scanner.find_spans, rule CONFIG_POSITIONS); its
spans win over a shorter one a pattern found inside them (`postgres://u:p#ss@h`: the whole
password, not `p`). The text is scanned line by line, not parsed: a tool result is a numbered
piece of a file, a diff, a grep hit or several files at once, which no parser takes whole.
"""

from __future__ import annotations

import re

from worker.redaction.configs.markup import element_spans
from worker.redaction.configs.oneliners import oneliner_spans
from worker.redaction.configs.pairs import line_pairs, spaced_pairs
from worker.redaction.configs.sections import section_spans

Span = tuple[str, int, int]

# a line worth reading: it names a credential (the rest is skipped without a look)
_KEYWORD = re.compile(r"(?i)pass|pwd|pw\b|secret|token|key|salt|cred|auth")


def _candidate_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line holding a credential keyword, in order."""
    out: list[tuple[int, int]] = []
    pos = 0
    for m in _KEYWORD.finditer(text):
        if m.start() < pos:
            continue
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        end = len(text) if end < 0 else end
        out.append((start, end))
        pos = end
    return out


def config_text_spans(text: str) -> list[Span]:
    """(kind, start, end) str offsets of every credential in a config position, sorted, disjoint."""
    found: list[Span] = []
    for start, end in _candidate_lines(text):
        line = text[start:end]
        found += [(k, start + s, start + e) for k, s, e in line_pairs(line)]
        found += [(k, start + s, start + e) for k, s, e in spaced_pairs(line)]
    if "<" in text and ("</" in text or "value" in text):
        found += element_spans(text)
    found += oneliner_spans(text)
    found += section_spans(text)
    return _disjoint(found)


def _disjoint(spans: list[Span]) -> list[Span]:
    """spans sorted, overlapping ones merged (the first one's kind)."""
    out: list[Span] = []
    for kind, start, end in sorted((s for s in spans if s[2] > s[1]), key=lambda s: (s[1], -s[2])):
        if out and start < out[-1][2]:
            if end > out[-1][2]:
                out[-1] = (out[-1][0], out[-1][1], end)
            continue
        out.append((kind, start, end))
    return out


def config_spans(data: bytes) -> list[Span]:
    """config_text_spans of UTF-8 bytes, in byte offsets."""
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # one character per byte: the offsets are the bytes'
    spans = config_text_spans(text)
    if not spans or len(text) == len(data):
        return spans
    out: list[Span] = []
    pos = at = 0
    for kind, start, end in spans:
        at += len(text[pos:start].encode("utf-8", "surrogatepass"))
        width = len(text[start:end].encode("utf-8", "surrogatepass"))
        out.append((kind, at, at + width))
        at += width
        pos = end
    return out


def merged(spans: list[Span], configs: list[Span]) -> list[Span]:
    """The scanner's spans with the config spans added: one that overlaps others takes them in
    (the whole value where a pattern stopped short), sorted and disjoint."""
    return _disjoint(spans + configs) if configs else spans
