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
    tables.py      a table's rows under a header that names a credential column (`# client
                   server secret IP addresses`, `TOKEN TTL EXPIRES …`); the lines below a
                   comment that spells out their format (`#  <username>: <password>[,<role> ...]`)
    entries.py     a credential name's literal collection (`API_KEYS = {"a": "…"}`), a user's
                   `name:SECRET` entry, a method's secret (`"alice" MD5 "pw"`), `OBF:…`

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
from worker.redaction.generic.commands import (
    dsn_argument_spans,
    dsn_spans,
    host_userinfo_spans,
    tool_spans,
    user_password_spans,
    webhook_spans,
)
from worker.redaction.generic.directives import directive_spans, flag_spans, header_spans, keyword_spans
from worker.redaction.generic.entries import (
    BLOCK_KEY,
    EAP_METHODS,
    block_spans,
    collection_spans,
    method_spans,
    schemed_spans,
    user_entry_spans,
)
from worker.redaction.generic.names import credential_name
from worker.redaction.generic.tables import HEAD, TEMPLATE, table_spans, template_spans
from worker.redaction.generic.tokens import decoded_userinfo, token_spans
from worker.redaction.lines import decode, to_bytes
from worker.redaction.search import match_spans

__all__ = ["WIDER", "decoded_userinfo", "position_spans", "token_spans"]

Span = tuple[str, int, int]

# a line worth reading names a credential somewhere (one RE2 pass; the rest is not looked at)
_KEYWORD = re2.compile(
    rb"(?i)pass|pwd|pw\b|secret|token|key|salt|pepper|cred|auth|psk|community|://[^\s:/@]*:[^\s@]+@|"
    # names.py: a key pair's private half named by a last word (`vapidPrivate`, `ed25519_priv`)
    rb"(?-i:[a-z0-9](?:Private|_private|_priv|-private)\b)|"
    # commands.py: `user:password@host:port` with no scheme
    rb"[\w.-]:[^\s@\"'/:]{1,128}@[\w.\[\]-]+:[0-9]|"
    rb"://[^\s\"'<>]{0,256}hook|@(?:tcp|udp|unix)\(|\s(?:-u|--user)[^\n]{0,80}\s-p|\s-p[^\n]{0,80}\s-u|"
    rb"\bredis-cli\b[^\n]{0,120}\s-a|\b(?:snmp[a-z]*|trapsess)\b[^\n]{0,120}\s-[cAX]|\bcom2sec|\bldap[a-z]+\b[^\n]{0,120}\s-w|\b(?:zip|unzip|zipcloak|7z[ar]?|rar|unrar)\b"
    rb"[^\n]{0,120}-p|\bopenssl\b[^\n]{0,200}\s-k|\bsmbclient\b[^\n]{0,120}(?:-u|--user)|\bnet(?:\.exe)?\s+use\b|"
    rb"password-stdin|[\"'](?:dbi|jdbc|[a-z]+:(?:host|dbname|server|database)=)|"
    # entries.py: a method's quoted secret, a scheme's encoding, a user's `name:secret` entry
    rb"(?-i:\b(?:"
    + b"|".join(m.encode() for m in EAP_METHODS)
    + rb")[ \t]+\")|\bcreateUser\b|\bsnmp(?:-server)?[ \t]+host\b|\b(?:trap2?|inform)sink\b|(?-i:OBF:|CRYPT:|MD5:[0-9a-f])|"
    rb"\b(?:users?|user[_-]?name|login|account)\b[\"']?[ \t]*[=:]?[ \t]*[\"']?[\w.@\\-]+:[^\s,\"';\\]"
)
# a line that may hold a tool's password flag (commands.py `tool_spans`): substrings, the cheapest test
_TOOL_WORDS = (
    "-p",
    "-P",
    "-w",
    "-a",
    "-k",
    "-U",
    "-c",
    "-A",
    "-X",
    "--user",
    "/user",
    "/USER",
    "/u:",
    "/U:",
    "password-stdin",
)
# entries.py's user entries (substrings, the cheapest test; its method secrets by EAP_METHODS)
_USER_WORDS = ("user", "User", "USER", "login", "Login", "LOGIN", "account", "Account", "ACCOUNT")
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
    if ' "' in text and ":" in text:
        yield from keyword_spans(text)
    if "-p" in text or "-P" in text:
        yield from user_password_spans(text)
    if "hook" in text or "Hook" in text:
        yield from webhook_spans(text)
    if "@tcp(" in text or "@unix(" in text or "@udp(" in text:
        yield from dsn_spans(text)
    if "@" in text and ":" in text:
        yield from host_userinfo_spans(text)
    if "," in text and ":" in text:
        yield from dsn_argument_spans(text)
    if any(word in text for word in _TOOL_WORDS):
        yield from tool_spans(text)
    if "[" in text or "{" in text or "(" in text:
        yield from collection_spans(text)
    if ":" in text:
        if any(word in text for word in _USER_WORDS):
            yield from user_entry_spans(text)
        if "OBF:" in text or "CRYPT:" in text or "MD5:" in text:
            yield from schemed_spans(text)
    if (
        "createUser" in text
        or "snmp" in text
        or "sink" in text
        or "com2sec" in text
        or ('"' in text and any(word in text for word in EAP_METHODS))
    ):
        yield from method_spans(text)


def _child_values(text: str) -> Iterable[Span]:
    for m in _CHILD_VALUE.finditer(text):
        named = credential_name(m.group(1))
        if named is not None and not spared(m.group(2), *named):
            yield named[0], m.start(2), m.end(2)


# an object whose type says what its value is: `{"type": "password", "value": "…"}` (Keycloak
# credentials, `aws ssm get-parameter`'s `"Type": "SecureString"`), either order, other keys
# between them, JSON or a Python dict's repr, on one line or several
def _typed(q: str) -> re.Pattern[str]:
    value = rf"{q}((?:[^{q}\\\n]|\\.)*){q}"
    pair = rf"{q}[^{q}\n]{{1,64}}{q}\s*:\s*(?:{q}(?:[^{q}\\\n]|\\.){{0,256}}{q}|[\w.+-]{{1,32}})"
    key = lambda name: rf"(?i:{q}{name}{q})\s*:\s*"  # noqa: E731
    between = rf"(?:\s*,\s*{pair}){{0,6}}\s*,\s*"
    return re.compile(
        rf"{key('type')}{q}([A-Za-z_-]+){q}{between}{key('value')}{value}"
        rf"|{key('value')}{value}{between}{key('type')}{q}([A-Za-z_-]+){q}"
    )


_TYPED_VALUE = (_typed('"'), _typed("'"))
_TYPE_KEYS = (b'"type"', b'"Type"', b"'type'", b'"TYPE"')
_VALUE_KEYS = (b'"value"', b'"Value"', b"'value'", b'"VALUE"')


def _typed_values(text: str) -> Iterable[Span]:
    for pattern in _TYPED_VALUE:
        for m in pattern.finditer(text):
            name, group = (m.group(1), 2) if m.group(1) is not None else (m.group(4), 3)
            secure = name.lower() == "securestring"
            named = ("secret", True) if secure else credential_name(name)
            if named is None:
                continue
            # a password is one whatever it looks like; another kind must look random
            strong = named[0] == "password" or secure
            if not spared(m.group(group), named[0], strong):
                yield named[0], m.start(group), m.end(group)


def _whole(data: bytes, named: bool) -> list[Span]:
    """What this layer reads across lines; `named`: a keyword marked a line of data (a block's
    key is such a line)."""
    child = b"<Value>" in data or b"<value>" in data
    typed = any(t in data for t in _TYPE_KEYS) and any(v in data for v in _VALUE_KEYS)
    lines = named and b"\n" in data
    blocks = [start for start, _ in match_spans(BLOCK_KEY, data)] if lines else []
    heads = [start for start, _ in match_spans(HEAD, data)] if lines else []
    forms = [start for start, _ in match_spans(TEMPLATE, data)] if lines and b"<" in data else []
    if not child and not typed and not blocks and not heads and not forms:
        return []
    text = decode(data)
    spans = list(_child_values(text)) if child else []
    spans += list(_typed_values(text)) if typed else []
    if blocks:
        spans += list(block_spans(text, blocks if len(text) == len(data) else _char_offsets(data, blocks)))
    if heads:
        spans += list(table_spans(text, heads if len(text) == len(data) else _char_offsets(data, heads)))
    if forms:
        spans += list(template_spans(text, forms if len(text) == len(data) else _char_offsets(data, forms)))
    return to_bytes(text, data, 0, spans)


def _char_offsets(data: bytes, starts: list[int]) -> list[int]:
    """The str offsets of sorted byte offsets at line starts (one pass over the data)."""
    out, chars, prev = [], 0, 0
    for at in starts:
        chars += len(decode(data[prev:at]))
        out.append(chars)
        prev = at
    return out


# the generic layer's reading of the lines config positions read (configs.config_spans)
WIDER = Wider(_KEYWORD, credential_name, _line, _whole)


def position_spans(data: bytes) -> list[Span]:
    """(kind, start, end) byte spans of credentials in credential positions (any line syntax) by
    the generic layer alone (the formats' own rules out)."""
    return config_spans(data, formats=False, wider=WIDER)
