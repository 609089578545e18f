"""The generic layer: credentials found by structure and shape, whatever the format or vendor (issue 42).

It runs beneath the rules (scanner.find_spans, rules GENERIC_POSITIONS and GENERIC_TOKENS) and
knows no format and no vendor:

    names.py       which names name a credential, in any spelling and case (`auth_pass`,
                   `requirepass`, `passwod`, `rocommunity`, `X-Upstream-Token`)
    directives.py  a credential name, whitespace, its value (`sentinel auth-pass m PW`,
                   `enable secret 5 HASH`, `proxy_set_header Authorization "Basic …"`); flags
                   (`--api-token X`, `--db-pass=X`) and headers (`X-Upstream-Token: v`)
    tokens.py      a short vendor-style prefix and a long random body (`ztk_live_4Q9v…`)
    commands.py    `-u USER -p PASS` and tools' own password flags (`redis-cli -a PASS`) on a
                   command line, a Go DSN's `user:PASS@tcp(…)`, a webhook URL's random path (no
                   credential word near any of them)

Key/value pairs (`=`, `:`, `=>`, JSON, attributes), XML elements and URL userinfo
(`scheme://user:p#ss@host`) are read with the config positions' own readers (configs/pairs.py,
configs/markup.py, configs/oneliners.py), given this layer's wider names;
an element that holds its value in a child (`<Password><Value>x</Value>`) and an object whose
type names its value (`{"type": "password", "value": "x"}`) are read here.
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
from worker.redaction.generic.commands import dsn_spans, tool_spans, user_password_spans, webhook_spans
from worker.redaction.generic.directives import directive_spans, flag_spans, header_spans
from worker.redaction.generic.names import credential_name
from worker.redaction.generic.tokens import decoded_userinfo, token_spans
from worker.redaction.lines import decode, to_bytes

__all__ = ["WIDER", "decoded_userinfo", "position_spans", "token_spans"]

Span = tuple[str, int, int]

# a line worth reading names a credential somewhere (one RE2 pass; the rest is not looked at)
_KEYWORD = re2.compile(
    rb"(?i)pass|pwd|pw\b|secret|token|key|salt|cred|auth|psk|community|://[^\s:/@]*:[^\s@]+@|"
    rb"://[^\s\"'<>]*hook|@(?:tcp|udp|unix)\(|\s-u[ \t]+[^\s-][^\n]*\s-p|\s-p[^\n]*\s-u[ \t]|"
    rb"redis-cli|ldap[a-z]+\s|zip|7z|rar\s|openssl|smbclient|net\s+use|password-stdin"
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
    if "-p" in text or "-P" in text:
        yield from user_password_spans(text)
    if "hook" in text or "Hook" in text:
        yield from webhook_spans(text)
    if "@tcp(" in text or "@unix(" in text or "@udp(" in text:
        yield from dsn_spans(text)
    yield from tool_spans(text)


def _child_values(text: str) -> Iterable[Span]:
    for m in _CHILD_VALUE.finditer(text):
        named = credential_name(m.group(1))
        if named is not None and not spared(m.group(2), *named):
            yield named[0], m.start(2), m.end(2)


# an object whose type says what its value is: `{"type": "password", "value": "…"}` (Keycloak
# credentials, Windows answer files in JSON), either order, on one line or several
_TYPED_VALUE = re.compile(
    r'"type"\s*:\s*"([A-Za-z_-]+)"\s*,\s*"value"\s*:\s*"((?:[^"\\\n]|\\.)*)"'
    r'|"value"\s*:\s*"((?:[^"\\\n]|\\.)*)"\s*,\s*"type"\s*:\s*"([A-Za-z_-]+)"'
)


def _typed_values(text: str) -> Iterable[Span]:
    for m in _TYPED_VALUE.finditer(text):
        name, group = (m.group(1), 2) if m.group(1) is not None else (m.group(4), 3)
        named = credential_name(name)
        if named is not None and not spared(m.group(group), *named):
            yield named[0], m.start(group), m.end(group)


def _whole(data: bytes) -> list[Span]:
    child = b"<Value>" in data or b"<value>" in data
    typed = b'"type"' in data and b'"value"' in data
    if not child and not typed:
        return []
    text = decode(data)
    spans = list(_child_values(text)) if child else []
    return to_bytes(text, data, 0, spans + list(_typed_values(text)) if typed else spans)


# the generic layer's reading of the lines config positions read (configs.config_spans)
WIDER = Wider(_KEYWORD, credential_name, _line, _whole)


def position_spans(data: bytes) -> list[Span]:
    """(kind, start, end) byte spans of credentials in credential positions (any line syntax) by
    the generic layer alone (the formats' own rules out)."""
    return config_spans(data, formats=False, wider=WIDER)
