"""Credential positions: structure before looks.

Where a value sits says it is a credential: the password of `scheme://user:password@host`,
`?password=`, `Authorization: <scheme> <credential>`, `curl -u user:password`, `--password X`,
ADO.NET/ODBC/JDBC `Password=`, a properties line `signing.password=x` or an attribute
`$mail->Password = '…'`. There anything but a visible reference (`is_reference`: `${VAR}`,
`<password>`, `****`, `your_password`) is redacted, `hunter2` and `password` too (`credential`).
Only bare header values (`X-Api-Key:`, `Bearer`, an `Authorization:` value without a scheme) must
also look like a token (`auth_value`).

The judges and their patterns are both here; detectors.py places `POSITIONS` and
`PROPERTY_POSITIONS` in the table. The keyword-assignment judge (judges.py) hands `--password X`
to `password_flag`.
"""

from __future__ import annotations

import re

from worker.redaction.keywords import key_words
from worker.redaction.rules import Detector, Judge, Judged, strip_quotes
from worker.redaction.shapes import PLACEHOLDER_MARK, is_code, is_elided, is_placeholder, looks_random

# Visible references and placeholders: `${VAR}`, `$VAR`, `$lowerVar`, `$(cmd)`, `%s`, `%(name)s`, `%VAR%`, `%%VAR%%`,
# `$1`, `{{ x }}`, `{name}`, `{0}`, `<password>`, `[PASSWORD]`, masks (`****`, `xxxxxxxx`) and metavars.
_REFERENCE = re.compile(
    r"\$\{[^}]*\}?|\$\(.*\)?|\$(?:[A-Z_][A-Z0-9_]*|[a-z_][A-Za-z_.]*)|\$[\d@*#]|%\(?\w*\)?[sd]|%[A-Za-z_]\w*%|%%[A-Z_][A-Z0-9_]*%%|\{\{.*\}\}|\{%.*%\}"
    r"|\{\s*[A-Za-z_][\w.]*\s*\}|\{\d*\}|<[^<>]*>|\[[A-Z _-]+\]|[*xX\u2022]+|[A-Z][A-Z_]*[A-Z]",
    re.DOTALL,
)
# a value that a quote closed early: `"Password=" + pw + ";"`, `"Pwd=" . $pw . ";"`
# (a variable is `$UPPER_CASE` or `$lowerCamel`; `$Tr0ngPass` is a password that starts with `$`)
_JOINED = re.compile(
    r"^\s*(?:\+|\.|&|\|\|)\s|\s(?:\+|\.|&|\|\|)\s*$|^\$(?:[{(]|(?:[A-Z_][A-Z0-9_]*|[a-z_][A-Za-z_]*)(?!\w))"
)


def is_joined(value: str) -> bool:
    """Whether a quote closed the value early and code joins a variable to it (`" + pw + "`)."""
    return _JOINED.search(value) is not None


def is_reference(value: str) -> bool:
    """Whether a value in a credential position visibly stands in for one (or is empty).

    Structure before looks: anything else there is a credential, `hunter2` and `password` too.
    """
    v = value.strip()
    if not v or PLACEHOLDER_MARK in v or _REFERENCE.fullmatch(v) is not None or is_joined(v) or is_elided(v):
        return True
    if len(v) >= 3 and len(set(v)) == 1:
        # one character repeated (`yyy`, `0000`, `----`): a mask, like `****`
        return True
    # `your_password`, `example-token`, `dummy.secret`: words that say the value is made up
    return _LETTERS.fullmatch(v) is not None and not _MADE_UP.isdisjoint(key_words(v))


_LETTERS = re.compile(r"[A-Za-z_.-]+")
_MADE_UP = frozenset(["your", "here", "example", "sample", "dummy", "fake", "placeholder", "redacted"])


def credential(kind: str) -> Judge:
    """Judge for a value in a credential position: a secret unless it is a visible reference."""

    def judge(secret: str, key: str | None) -> Judged:
        lo, hi, _ = strip_quotes(secret)
        return None if is_reference(secret[lo:hi]) else (kind, lo, hi)

    return judge


def auth_value(kind: str, min_len: int = 8, names_ok: bool = True) -> Judge:
    """Judge for credentials after `Authorization: Bearer`, `-u user:`, `X-Api-Key:`."""

    def judge(secret: str, key: str | None) -> Judged:
        lo, hi, _ = strip_quotes(secret)
        value = secret[lo:hi]
        if len(value) < min_len or is_placeholder(value) or value.startswith(("$", "%")):
            return None
        # `token: TokenInterface`, `"x-api-key": self.api_key`: a name in code, not a credential
        if not names_ok and is_code(value) and not any(c.isdigit() for c in value):
            return None
        # `{{var}}`, `{name}` are templates; `{Zq5kVr…}` is a value some docs wrap in braces
        if value.startswith("{") and not looks_random(value.strip("{}"), min_len=8, min_bits=3.0):
            return None
        return kind, lo, hi

    return judge


def short_flag_password(secret: str, key: str | None) -> Judged:
    """Judge for `-u USER -p PASSWORD` (psexec, mongo): a port after `-p` (`docker run -u 1000 -p
    8080:80`) is no password."""
    if PORT.fullmatch(secret):
        return None
    return _FLAG_PASSWORD(secret, key)


# a port, a range of them or `host:port` (`5432`, `8080:80`, `9000-9010:9000-9010`, `53/udp`)
PORT = re.compile(r"[\d.:-]+(?:/(?:tcp|udp|sctp))?")
_FLAG_PASSWORD = auth_value("basic_auth", 4)


def url_password(secret: str, key: str | None) -> Judged:
    """Judge for `scheme://user:password@host`: only the password, whatever it looks like."""
    if len(secret) > 200 or OPTIONAL_PART.fullmatch(secret):
        return None
    return credential("url_password")(secret, key)


# the end of a usage line's optional part: `username[:password]@host`, `[user[:password]]@host`
OPTIONAL_PART = re.compile(r"(?i:password|passwd|pass|pwd|secret|token)\]+")


_SCHEMES = frozenset(["basic", "bearer", "token", "ssws", "apikey", "api-key", "sso-key", "otoken", "key"])


def authorization(secret: str, key: str | None) -> Judged:
    """Judge for `Authorization: <scheme> <credential>` (any scheme) or a bare credential.

    After a known or capitalised scheme the credential is judged by position; a lower-case word
    before it (`Authorization: header must …`) is prose. A bare value must look like a token.
    """
    scheme, _, value = secret.partition(" ")
    value = value.lstrip(" \t")
    if not value:
        return auth_value("authorization")(secret, key) if scheme.lower() not in _SCHEMES else None
    if scheme.lower() == "digest":
        # a challenge response (`username="…", response="<hash>"`), not a reusable credential
        return None
    known = scheme.lower() in _SCHEMES
    if not known and (not scheme[0].isupper() or (value.isalpha() and value.islower())):
        return None
    judged = credential("authorization")(value, key)
    if judged is None:
        return None
    start = len(secret) - len(value)
    return judged[0], start + judged[1], start + judged[2]


def user_password(secret: str, key: str | None) -> Judged:
    """Judge for the password of `curl -u user:password`; `-u 1000:1000` is a uid and gid."""
    if (key or "").strip("\"'").isdigit() and secret.strip("\"'").isdigit():
        return None
    if (key or "").startswith(("+", "%")):
        return None  # `date -u +%Y-%m-%dT%H:%M:%S`: a format after date's -u, no user
    return credential("basic_auth")(secret, key)


def connection_password(secret: str, key: str | None) -> Judged:
    """Judge for `Password=` in ADO.NET/ODBC/JDBC strings: quoted and `{braced}` values unwrapped."""
    if secret.startswith("{") and secret.endswith("}") and len(secret) > 2 and not is_reference(secret):
        return "connection_string_password", 1, len(secret) - 1
    return credential("connection_string_password")(secret, key)


def is_password_flag(key: str | None) -> bool:
    """Whether a flag names a password (`--password`, `-Pass`), not `--password-stdin` or `--token`."""
    words = key_words(key or "")
    return bool(words) and words[-1] in ("password", "passwd", "pass", "pwd", "passphrase")


def password_flag(secret: str, key: str | None) -> Judged:
    """Judge for `--password X`: by position, unless X is prose, a metavar or another flag.

    Only for keys `is_password_flag` accepts; other flags are left to the assignment judge.
    """
    if not is_password_flag(key):
        return None
    lo, hi, _ = strip_quotes(secret)
    if secret[lo:hi].startswith("-") or _PROSE.fullmatch(secret[lo:hi]) is not None:
        return None
    return credential("password")(secret, key)


# words that follow `--password` in prose and help text, not as its value
_PROSE = re.compile(
    r"(?i:a|an|and|argument|as|at|be|by|can|flag|for|from|if|in|instead|is|it|must|not|of|on|option|or"
    r"|parameter|should|the|then|to|was|when|will|with)"
)


def properties_password(secret: str, key: str | None) -> Judged:
    """Judge for `signing.password=x` lines: the rest of the line, unless it is code or a reference."""
    value = secret.rstrip()
    head = (key or "").split(".", 1)[0]
    if head in ("self", "this", "cls") or value.endswith((";", ")", "{")) or " = " in value:
        # `this.password = pw;`, `self.password = password`: an assignment in code
        return None
    return credential("password")(value, key)


# ADO.NET / ODBC / JDBC values: quoted, `{braced}` (`}}` escapes a brace) or bare up to `;`
_CONN_VALUE = r"(\{(?:[^}\r\n]|\}\})*?\}|\"[^\"\r\n]*\"|'[^'\r\n]*'|[^;\"'<>\s{][^;\"'<>\s]*)"

POSITIONS: tuple[Detector, ...] = (
    # Credentials in URLs, connection strings, headers and command lines
    # `scheme://user:password@host`: the user may hold `@` (`administrator@vsphere.local`), and so
    # may the password (`p@ss`): it runs to the last `@` before the host
    Detector(
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]*:\\?/\\?/[^\s:/'\"`<>\\]*:([^\s/?#'\"`<>\\]+)@[A-Za-z0-9\[_%${-]",
        url_password,
        1,
    ),
    Detector("url_password", r"\bjdbc:oracle:[a-z]+:[^\s/@:'\"]+/([^\s/@'\"]+)@", url_password, 1),
    Detector(
        "url_password",
        r"[?&](?i:password|passwd|pwd)=([^&#\s\"'<>;`]+)",
        credential("url_password"),
        1,
    ),
    # any scheme (`Basic`, `Bearer`, `SSWS`, `Token`, unknown ones) then the credential
    Detector(
        "authorization",
        r"(?i:\bauthorization\\?[\"'`]?[ \t]*[:=][ \t]*\\?[\"'`]?)"
        r"((?:[A-Za-z][A-Za-z0-9_-]*[ \t]+)?(?:<[^<>\r\n]*>|[^\s\"'`\\,;]+)(?:[ \t]+[A-Za-z0-9._~+/=-]{8,})?)",
        authorization,
        1,
    ),
    Detector(
        "api_key_header",
        r"(?i:\b(?:x-api-key|x-auth-token|x-access-token|api-key|apikey|x-jfrog-art-api|private-token|x-vault-token|token|x-goog-api-key)[\"']?:[ \t]*)([A-Za-z0-9._~+/=-]{8,})",
        auth_value("api_key_header", names_ok=False),
        1,
    ),
    Detector(
        "bearer_token", r"(?i:\bbearer[ \t]+)([A-Za-z0-9._~+/-]{20,}=*)", auth_value("bearer_token", 20), 1
    ),
    Detector(
        "basic_auth",
        r"(?:\s|^)(?:-u|--user|--proxy-user|-U)(?:[ \t]+|=)[\"']?([^\s:\"']+|\"[^\"]+\")[\"']?:([^\s]+)",
        user_password,
        2,
        1,
    ),
    # ADO.NET / ODBC / JDBC: `;Password=x`, or a leading `Password=x;` before another `Key=`;
    # values may be quoted or `{braced}` (`}}` escapes a brace)
    Detector(
        "connection_string_password",
        r"(?i:;[ \t]*(?:password|pwd|secret|sharedaccesskey|accountkey)[ \t]*=[ \t]*)"
        + _CONN_VALUE
        + r"(?:[^}]|$)",
        connection_password,
        1,
    ),
    Detector(
        "connection_string_password",
        r"(?i:\b(?:password|pwd)[ \t]*=[ \t]*)" + _CONN_VALUE + r"[ \t]*;[ \t]*[A-Za-z][A-Za-z ]*=",
        connection_password,
        1,
    ),
)

# Passwords in code and properties files: lines and attributes (lane 1)
PROPERTY_POSITIONS: tuple[Detector, ...] = (
    # gradle.properties and Java properties: `signing.password=x`, `mavenPassword=x` to end of line
    Detector(
        "password",
        r"(?m:^)[ \t]*((?:systemProp\.)?[a-z][A-Za-z0-9.]*(?:Password|Passwd|\.password|\.passwd))"
        r"[ \t]*=[ \t]*([^\s\"'`][^\r\n]*)",
        properties_password,
        2,
        1,
        lane=1,
    ),
    # an attribute set to a string literal: PHPMailer's `$mail->Password = '…';`, C# `.Password = "…"`
    Detector(
        "password",
        r"(?:->|\.)[ \t]*((?i:password|passwd|pwd))[ \t]*=[ \t]*(\"[^\"\r\n]*\"|'[^'\r\n]*')",
        credential("password"),
        2,
        1,
        lane=1,
    ),
)
