"""The generic layer: credentials found by structure and shape, whatever the format or vendor (issue 42).

It runs beneath the rules (scanner.find_spans, rules GENERIC_POSITIONS and GENERIC_TOKENS) and
knows no format and no vendor:

    names.py       which names name a credential, in any spelling and case (`auth_pass`,
                   `requirepass`, `passwod`, `rocommunity`, `X-Upstream-Token`)
    directives.py  a credential name, whitespace, its value (`sentinel auth-pass m PW`,
                   `enable secret 5 HASH`, `proxy_set_header Authorization "Basic …"`); flags
                   (`--api-token X`, `--db-pass=X`) and headers (`X-Upstream-Token: v`)
    tokens.py      a short vendor-style prefix and a long random body (`ztk_live_4Q9v…`)

Key/value pairs (`=`, `:`, `=>`, JSON, attributes), XML elements and URL userinfo
(`scheme://user:p#ss@host`) are read with the config positions' own readers (configs/pairs.py,
configs/markup.py, configs/oneliners.py), given this layer's wider names;
an element that holds its value in a child (`<Password><Value>x</Value>`) is read here.
Encoded forms come from the scanner: base64 runs are scanned decoded (a run that decodes to
`user:password` is a credential, `decoded_userinfo`), and encoded.py re-scans percent- and
JSON-escaped text decoded, this layer included. Placeholders and references are spared as in
config positions (configs/names.py `spared`). The text is read line by line around a keyword
(lines.py), never parsed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import re2

from worker.redaction.configs import Wider, config_spans
from worker.redaction.configs.names import spared
from worker.redaction.configs.oneliners import url_spans
from worker.redaction.generic.directives import directive_spans, flag_spans, header_spans
from worker.redaction.generic.names import credential_name
from worker.redaction.generic.tokens import decoded_userinfo, token_spans
from worker.redaction.lines import decode, to_bytes

__all__ = ["WIDER", "decoded_userinfo", "position_spans", "token_spans"]

Span = tuple[str, int, int]

# a line worth reading names a credential somewhere (one RE2 pass; the rest is not looked at)
_KEYWORD = re2.compile(
    rb"(?i)pass|pwd|pw\b|secret|token|key|salt|cred|auth|psk|community|://[^\s:/@]*:[^\s@]+@"
)
# an element whose value is in a child: `<Password>\n  <Value>x</Value>` (Windows answer files)
_CHILD_VALUE = re.compile(
    r"<(?:[\w.-]+:)?([A-Za-z_][\w.-]*)(?:\s[^<>]*)?>\s*<(?:[\w.-]+:)?(?:Value|value)>([^<]*)</"
)


def _line(text: str, whole: bool) -> Iterable[Span]:
    """The generic readers of one line beyond pairs and elements (which configs/ reads with
    `credential_name` in the same pass)."""
    if "://" in text:
        yield from url_spans(text)
    if whole:
        yield from directive_spans(text)
    if "-" in text:
        yield from flag_spans(text)
    if ": " in text or ":\t" in text:
        yield from header_spans(text)


def _child_values(text: str) -> Iterable[Span]:
    for m in _CHILD_VALUE.finditer(text):
        named = credential_name(m.group(1))
        if named is not None and not spared(m.group(2), *named):
            yield named[0], m.start(2), m.end(2)


def _whole(data: bytes) -> list[Span]:
    if b"<Value>" not in data and b"<value>" not in data:
        return []
    text = decode(data)
    return to_bytes(text, data, 0, _child_values(text))


# the generic layer's reading of the lines config positions read (configs.config_spans)
WIDER = Wider(_KEYWORD, credential_name, _line, _whole)


def position_spans(data: bytes) -> list[Span]:
    """(kind, start, end) byte spans of credentials in credential positions (any line syntax) by
    the generic layer alone (the formats' own rules out)."""
    return config_spans(data, formats=False, wider=WIDER)
