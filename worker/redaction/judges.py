"""Judges: given a candidate a detector pattern found, is it a secret, of which kind, and where?

A judge gets the region that holds the candidate and, for assignments, the key that names it, and
returns (kind, start, end) inside the region, or None to reject placeholders, code and values
that only sit where a secret could.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from worker.compaction.shapes import (
    PLACEHOLDER_MARK,
    char_classes,
    entropy_bits,
    is_code,
    is_file_path,
    is_hex_digest,
    is_placeholder,
    is_uuid,
    looks_random,
)
from worker.redaction.keywords import (
    echoes_key,
    is_assigned_secret,
    key_words,
    names_other_value,
    secret_kind_of_key,
)

Judged = tuple[str, int, int] | None
Judge = Callable[[str, str | None], Judged]


def token(kind: str, min_bits: float = 0.0) -> Judge:
    """Judge for prefixed provider tokens: anything but an obvious placeholder (`ghp_xxxx…`)."""

    def judge(secret: str, key: str | None) -> Judged:
        body = secret[len(secret) // 4 :]
        if is_placeholder(secret) or is_placeholder(body) or entropy_bits(body) < min_bits:
            return None
        return kind, 0, len(secret)

    return judge


def _strip_quotes(region: str) -> tuple[int, int, bool]:
    """The span of a value inside `\\"value`, `'value`, `` `value `` or `value` and whether quoted."""
    lo = 0
    while lo < len(region) and region[lo] == "\\":
        lo += 1
    quoted = lo < len(region) and region[lo] in "\"'`"
    while lo < len(region) and region[lo] in "\\\"'`":
        lo += 1
    hi = len(region)
    while hi > lo and region[hi - 1] in "\\\"'`,;)":
        hi -= 1
    return lo, hi, quoted


# Visible references and placeholders: `${VAR}`, `$VAR`, `$(cmd)`, `%s`, `%(name)s`, `%VAR%`,
# `$1`, `{{ x }}`, `{name}`, `{0}`, `<password>`, `[PASSWORD]`, masks (`****`, `xxxxxxxx`) and metavars.
_REFERENCE = re.compile(
    r"\$\{[^}]*\}?|\$\(.*\)?|\$[A-Za-z_][\w.]*|\$[\d@*#]|%\(?\w*\)?[sd]|%[A-Za-z_]\w*%|\{\{.*\}\}|\{%.*%\}"
    r"|\{\s*[A-Za-z_][\w.]*\s*\}|\{\d*\}|<[^<>]*>|\[[A-Z _-]+\]|[*xX\u2022]+|[A-Z][A-Z_]*[A-Z]",
    re.DOTALL,
)
# a value that a quote closed early: `"Password=" + pw + ";"`, `"Pwd=" . $pw . ";"`
_JOINED = re.compile(r"^\s*(?:\+|\.|&|\|\|)\s|\s(?:\+|\.|&|\|\|)\s*$|^\$[A-Za-z_{(]")


def is_reference(value: str) -> bool:
    """Whether a value in a credential position visibly stands in for one (or is empty).

    Structure before looks: anything else there is a credential, `hunter2` and `password` too.
    """
    v = value.strip()
    if not v or PLACEHOLDER_MARK in v or _REFERENCE.fullmatch(v) is not None or _JOINED.search(v) is not None:
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
        lo, hi, _ = _strip_quotes(secret)
        return None if is_reference(secret[lo:hi]) else (kind, lo, hi)

    return judge


def assignment(secret: str, key: str | None) -> Judged:
    """Judge for `key = value` in any syntax: the key names the kind, the value must fit it."""
    named = secret_kind_of_key(key or "")
    if named is None:
        return None
    if (key or "").lstrip().startswith("-") and named[0] == "password":
        return password_flag(secret, key)
    kind, strong = named
    lo, hi, quoted = _strip_quotes(secret)
    value = secret[lo:hi]
    if _JOINED.search(value) is not None:
        return None
    if secret.lstrip("\\").startswith("`") and any(c.isspace() for c in value):
        # `KEY=`cmd arg``: shell command substitution, the value is computed at run time
        return None
    if value.startswith("!!") and " " in value:
        # a YAML tag (`!!binary MjNj…`): the value follows it
        skip = value.index(" ") + 1
        lo, value = lo + skip, value[skip:]
    env_style = key is not None and kind == "password" and _ENV_KEY.match(key.strip("\"' -")) is not None
    if not is_assigned_secret(kind, strong, value, quoted, env_style, key or ""):
        return None
    return kind, lo, lo + len(value)


_ENV_KEY = re.compile(r"^(?:[A-Z][A-Z0-9_]*|[A-Z][a-z]+)$")


def _looks_assigned(secret: str, key: str | None) -> Judged:
    """The assignment judge without the flag shortcut: `--password-stdin x` is judged by looks."""
    return assignment(secret, (key or "").lstrip().lstrip("-"))


def flag_assignment(secret: str, key: str | None) -> Judged:
    """Judge for `--password x` and bare `password x`: a bare one needs a value with a digit."""
    judged = assignment(secret, key)
    if judged is None or (key or "").lstrip().startswith("-"):
        return judged
    value = secret[judged[1] : judged[2]]
    return judged if any(c.isdigit() for c in value) and not value.endswith(".") else None


def argument(secret: str, key: str | None) -> Judged:
    """Judge for `f("api_token", "value")`: the value must also look like a token."""
    judged = assignment(secret, key)
    if judged is None or not looks_random(secret[judged[1] : judged[2]], min_len=8, min_bits=2.5):
        return None
    return judged


def private_key(secret: str, key: str | None) -> Judged:
    """Judge for key blocks: a body of real content, not `anything` or nothing."""
    body = secret.split("-----", 2)[-1].split("-----END")[0]
    if sum(c.isalnum() for c in body) < 20:
        return None
    return "private_key", 0, len(secret)


def high_entropy(secret: str, key: str | None) -> Judged:
    """Judge for `NAME = <random 20+ chars>`: any name that does not describe the value."""
    if key is not None and names_other_value(key):
        return None
    lo, hi, quoted = _strip_quotes(secret)
    value = secret[lo:hi]
    if (
        len(value) < 20
        or (key is not None and echoes_key(key, value))
        or (not quoted and is_code(value))
        or is_file_path(value)
        or is_hex_digest(value)
        or is_uuid(value)
        or value[:4].lower() in ("sha1", "sha2", "sha5", "md5-")
    ):
        return None
    if char_classes(value.strip("=")) < 3 or not looks_random(value, min_len=20, min_bits=4.0):
        return None
    return "high_entropy_string", lo, hi


def url_password(secret: str, key: str | None) -> Judged:
    """Judge for `scheme://user:password@host`: only the password, whatever it looks like."""
    if len(secret) > 200:
        return None
    return credential("url_password")(secret, key)


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
    return credential("basic_auth")(secret, key)


def connection_password(secret: str, key: str | None) -> Judged:
    """Judge for `Password=` in ADO.NET/ODBC/JDBC strings: quoted and `{braced}` values unwrapped."""
    if secret.startswith("{") and secret.endswith("}") and len(secret) > 2 and not is_reference(secret):
        return "connection_string_password", 1, len(secret) - 1
    return credential("connection_string_password")(secret, key)


def password_flag(secret: str, key: str | None) -> Judged:
    """Judge for `--password X`: by position, unless X is prose, a metavar or another flag."""
    words = key_words(key or "")
    if not words or words[-1] not in ("password", "passwd", "pass", "pwd", "passphrase"):
        return _looks_assigned(secret, key)
    lo, hi, _ = _strip_quotes(secret)
    if secret[lo:hi].startswith("-") or _PROSE.fullmatch(secret[lo:hi]) is not None:
        return None
    return credential("password")(secret, key)


def properties_password(secret: str, key: str | None) -> Judged:
    """Judge for `signing.password=x` lines: the rest of the line, unless it is code or a reference."""
    value = secret.rstrip()
    head = (key or "").split(".", 1)[0]
    if head in ("self", "this", "cls") or value.endswith((";", ")", "{")) or " = " in value:
        # `this.password = pw;`, `self.password = password`: an assignment in code
        return None
    return credential("password")(value, key)


# words that follow `--password` in prose and help text, not as its value
_PROSE = re.compile(
    r"(?i:a|an|and|argument|as|at|be|by|can|flag|for|from|if|in|instead|is|it|must|not|of|on|option|or"
    r"|parameter|should|the|then|to|was|when|will|with)"
)


def auth_value(kind: str, min_len: int = 8, names_ok: bool = True) -> Judge:
    """Judge for credentials after `Authorization: Bearer`, `-u user:`, `X-Api-Key:`."""

    def judge(secret: str, key: str | None) -> Judged:
        lo, hi, _ = _strip_quotes(secret)
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


def random_token(kind: str, min_len: int = 16) -> Judge:
    """Judge for bare tokens with no prefix of their own: they must look random."""

    def judge(secret: str, key: str | None) -> Judged:
        return (kind, 0, len(secret)) if looks_random(secret, min_len=min_len) else None

    return judge


def sized(kind: str, low: int, high: int) -> Judge:
    """Judge for tokens whose length the pattern leaves open (counted repeats slow the DFA)."""

    def judge(secret: str, key: str | None) -> Judged:
        return (kind, 0, len(secret)) if low <= len(secret) <= high and not is_placeholder(secret) else None

    return judge


def digits_then(kind: str, mark: str, low: int, high: int) -> Judge:
    """Judge for `<digits><mark><token>` shapes whose digit count the pattern leaves open."""

    def judge(secret: str, key: str | None) -> Judged:
        digits = secret.index(mark)
        return (kind, 0, len(secret)) if low <= digits <= high and looks_random(secret, 20) else None

    return judge


def anthropic_key(kind: str) -> Judge:
    """Anthropic keys. Real ones end in `AA`, but a look-alike with the full prefix is redacted too:
    text alone cannot tell a test fixture from a live key, and over-redacting is the safe side."""

    def judge(secret: str, key: str | None) -> Judged:
        return token(kind)(secret, key)

    return judge


def credential_argument(secret: str, key: str | None) -> Judged:
    """Judge for the password argument of `NetworkCredential("u", "p")` and like constructors."""
    lo, hi, _ = _strip_quotes(secret)
    value = secret[lo:hi]
    if len(value) < 4 or is_placeholder(value) or value.startswith(("$", "%", "{")):
        return None
    return "password", lo, hi


def stated_password(secret: str, key: str | None) -> Judged:
    """Judge for prose: `the password for user 'postgres' is 'admin'`."""
    lo, hi, _ = _strip_quotes(secret)
    value = secret[lo:hi]
    if len(value) < 4 or " " in value or is_placeholder(value) or value.startswith(("$", "%", "{")):
        return None
    return "password", lo, hi


def paired_password(secret: str, key: str | None) -> Judged:
    """Judge for `user = alice` then `password = open_sesame`: config lines, so bare words count."""
    value = secret.strip()
    # a bare lower-case word is a literal here; `purl.password`, `SecretStr`, `f(x)` are code
    if is_code(value.rstrip(",;")) and _BARE_WORD.match(value) is None:
        return None
    if not is_assigned_secret("password", True, value, False, True, key or ""):
        return None
    return "password", 0, len(value)


_BARE_WORD = re.compile(r"^[a-z][a-z0-9_]*$")


_CHILD = re.compile(r"^([\w.-]+):[ \t]+(\S.*)$")


def block_value(secret: str, key: str | None) -> Judged:
    """Judge for a value on the indented lines under `key =` / `key:` (INI continuations, YAML).

    Bare lines (`hunter2`, `password123`) are one value; a single `child: value` line (Travis'
    `secure:`) holds the value. A map of several entries is left to the entries' own detectors.
    """
    named = secret_kind_of_key((key or "").strip())
    if named is None:
        return None
    indent = len((key or "").expandtabs()) - len((key or "").expandtabs().lstrip())
    lines: list[tuple[int, str]] = []
    at = 0
    for line in secret.split("\n"):
        body = line.strip()
        if not body or len(line.expandtabs()) - len(line.expandtabs().lstrip()) <= indent:
            break
        lines.append((at + line.index(body), body))
        at += len(line) + 1
    if not lines:
        return None
    kind, strong = named
    child = _CHILD.match(lines[0][1])
    if child is not None:
        if len(lines) > 1 or names_other_value(child.group(1)):
            return None
        lo, hi, quoted = _strip_quotes(child.group(2))
        value = child.group(2)[lo:hi]
        if not is_assigned_secret(kind, strong, value, quoted, True, key or ""):
            return None
        start = lines[0][0] + child.start(2) + lo
        return kind, start, start + len(value)
    if any(len(body.split()) > 1 for _, body in lines):
        return None
    if not any(is_assigned_secret(kind, strong, body, False, True, key or "") for _, body in lines):
        return None
    return kind, lines[0][0], lines[-1][0] + len(lines[-1][1])


def azure_client_secret(secret: str, key: str | None) -> Judged:
    """Judge for Azure AD client secrets: three characters, a digit, `Q~`, then the secret."""
    at = secret.find("Q~") - 4
    if at < 0 or is_placeholder(secret[at + 6 :]):
        return None
    return "azure_client_secret", at, len(secret)


def telegram(secret: str, key: str | None) -> Judged:
    """Judge for Telegram bot tokens: an 8 to 10 digit bot id before `:AA…`."""
    digits = secret.index(":")
    return ("telegram_bot_token", 0, len(secret)) if 8 <= digits <= 10 else None


def discord(secret: str, key: str | None) -> Judged:
    """Judge for Discord bot tokens: a 24-26 character base64 user id, a 6, then a random tail."""
    # the id and the tail are mixed case with digits; dotted identifiers are not
    first, _, tail = secret.split(".", 2)
    if not 24 <= len(first) <= 26 or char_classes(first) < 3 or char_classes(tail) < 3:
        return None
    return token("discord_bot_token", 3.0)(secret, key)


def slack(secret: str, key: str | None) -> Judged:
    """Judge for Slack `xox?-` tokens: digits and a mixed tail, not `xoxb-RANDOMSTRINGHERE`."""
    body = secret.split("-", 1)[1]
    # the random part follows the numeric team/bot id segments; it may itself start with a digit
    segments = body.split("-")
    while len(segments) > 1 and segments[0].isdigit():
        segments.pop(0)
    tail = "-".join(segments)
    if len(body) < 14 or is_placeholder(tail) or not any(c.isdigit() for c in body):
        return None
    if not (any(c.isdigit() for c in tail) and any(c.isalpha() for c in tail)):
        return None
    return "slack_token", 0, len(secret)
