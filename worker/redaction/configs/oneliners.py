"""One-line credential formats, URLs with any password, and bare key files.

~/.pgpass            db.example.com:5432:app:alice:s3cr#t     (host:port:db:user:password)
.htpasswd            alice:$apr1$…   bob:{SHA}…   carol:$2y$10$…
.git-credentials     https://alice:ghp_…@github.com           (a URL, below)
URLs                 postgres://app:p#ss@w0rd!@db:5432/app    (the password runs to the last `@` before the host)
.npmrc               //registry.npmjs.org/:_authToken=npm_…   _auth=…   //host/:_password=…
key files            config/master.key, credentials/*.key, secret_key_base: a bare key on the line after its name
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from worker.redaction.configs.names import spared
from worker.redaction.positions import OPTIONAL_PART

Span = tuple[str, int, int]

_NUMBERED = r"[ \t]*(?:\d+(?:\u2192|\t)[ \t]*)?"
# host:port:database:user:password, `\:` escapes a colon; the port a number or `*`, the database
# not a number (`file.py:12:5:` is a compiler's position)
_PGPASS = re.compile(
    r"(?m)^" + _NUMBERED + r"(?:[^\s:\\]|\\.)+:(?:\d{1,5}|\*):(?![0-9]+:)(?:[^\s:\\]|\\.)+:(?:[^\s:\\]|\\.)+:"
    r"((?:[^\s\\]|\\.)+)[ \t]*$"
)
# a user and a password hash (Apache's apr1/SHA/bcrypt/crypt variants)
_HTPASSWD = re.compile(
    r"(?m)^"
    + _NUMBERED
    + r"[\w.@-]{1,64}:((?:\$apr1\$|\$2[abxy]\$|\{SHA\}|\$[156]\$|\$y\$)[^\s:]{8,})[ \t]*$"
)
# scheme://user:password@host: the password may hold `#`, `@`, `!`, `?`, `:` and runs to the
# last `@` that a host follows, within one run of non-space characters
_URL = re.compile(
    r"\b[A-Za-z][A-Za-z0-9+.-]{1,30}://([^\s:/@'\"`<>]*):([^\s'\"`<>]+)@(?=[A-Za-z0-9\[_.%${-])"
)
# Postfix sasl_passwd: `[smtp.host]:587 user:password` (the host bracketed or with a port)
_SASL = re.compile(
    r"(?m)^"
    + _NUMBERED
    + r"(?:\[[\w-]+\.[\w.-]+\](?::\d+)?|[\w-]+\.[\w.-]+:\d+)[ \t]+[^\s:]+:([^\n]+?)[ \t]*$"
)
_NPMRC = re.compile(r"(?m)(?:^|:)_(authToken|auth|password)[ \t]*=[ \t]*([^\s\"'`+]\S*)")
_KEY_FILE = re.compile(
    r"(?i)(?:master\.key|credentials\.key|secret\.key|secret_key_base|\.secret_key|production\.key|development\.key"
    r"|test\.key|signing\.key|jwt\.key)[\"'`]?[^\n]{0,80}\n+"
    + _NUMBERED
    + r"([A-Za-z0-9+/=_-]{24,})[ \t]*(?:\n|$)"
)


def line_spans(text: str) -> Iterator[Span]:
    """pgpass passwords, htpasswd hashes, sasl_passwd passwords and URL passwords of some lines."""
    for m in _PGPASS.finditer(text):
        if not spared(m.group(1), "password", True):
            yield "password", m.start(1), m.end(1)
    for m in _HTPASSWD.finditer(text):
        yield "password_hash", m.start(1), m.end(1)
    for m in _SASL.finditer(text):
        if not spared(m.group(1), "password", True):
            yield "password", m.start(1), m.end(1)
    yield from url_spans(text)


def url_spans(text: str) -> Iterator[Span]:
    """The password of every `scheme://user:password@host` in text (it may hold `#`, `@`, `!`)."""
    for m in _URL.finditer(text):
        password = m.group(2)
        if re.match(r"\d+(?:[/?#]|$)", password) or OPTIONAL_PART.fullmatch(password):
            continue  # `host:8080/path@…`: a port and a path; `user[:password]@host`: a usage line
        if not spared(password, "password", True) and len(password) <= 200:
            yield "url_password", m.start(2), m.end(2)


def npmrc_spans(text: str) -> Iterator[Span]:
    """.npmrc's `_authToken=`, `_auth=`, `_password=` values."""
    for m in _NPMRC.finditer(text):
        if not spared(m.group(2), "token", True):
            yield ("password" if m.group(1) == "password" else "token"), m.start(2), m.end(2)


# names of bare key files (`config/master.key`) whose key follows on the next line
KEY_FILE_NAMES = (
    b"master.key",
    b"credentials.key",
    b"secret.key",
    b"secret_key_base",
    b".secret_key",
    b"production.key",
    b"development.key",
    b"test.key",
    b"signing.key",
    b"jwt.key",
)


def key_file_spans(data: bytes, decode: Callable[[bytes], str]) -> Iterator[Span]:
    """The bare key on the line after a key file's name (`$ cat config/master.key`), byte offsets."""
    for name in KEY_FILE_NAMES:
        at = data.find(name)
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            end = at
            for _ in range(3):
                nl = data.find(b"\n", end + 1)
                end = len(data) if nl < 0 else nl
            raw = data[start:end]
            text = decode(raw)
            m = _KEY_FILE.search(text)
            if m is not None:
                lo = len(text[: m.start(1)].encode("utf-8", "surrogatepass"))
                yield "secret", start + lo, start + lo + len(m.group(1).encode())
            at = data.find(name, at + 1)
