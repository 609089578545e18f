"""Judges for looks: vendor token formats, key blocks and keyword assignments.

A judge gets the region a detector pattern found and, for assignments, the key that names it, and
returns (kind, start, end) inside the region, or None to reject placeholders, code and values that
only sit where a secret could. Here a value must look the part: a vendor token must not be a
placeholder (`token`, `slack`, `discord`), an assigned value must fit the kind its key names
(`assignment`, with keywords.py). Values in credential positions, judged by where they sit, are
in positions.py; the contract (`Judge`, `Judged`, `strip_quotes`) is in rules.py.
"""

from __future__ import annotations

import re

from worker.redaction.keywords import (
    echoes_key,
    is_assigned_secret,
    names_other_value,
    secret_kind_of_key,
)
from worker.redaction.positions import is_joined, is_password_flag, password_flag
from worker.redaction.rules import Judge, Judged, strip_quotes
from worker.redaction.shapes import (
    RESOURCE_NAME,
    char_classes,
    entropy_bits,
    is_code,
    is_file_path,
    is_hex_digest,
    is_placeholder,
    is_uuid,
    is_yaml_tag,
    looks_random,
)


def token(kind: str, min_bits: float = 0.0) -> Judge:
    """Judge for prefixed provider tokens: anything but an obvious placeholder (`ghp_xxxx…`)."""

    def judge(secret: str, key: str | None) -> Judged:
        body = secret[len(secret) // 4 :]
        if is_placeholder(secret) or is_placeholder(body) or entropy_bits(body) < min_bits:
            return None
        return kind, 0, len(secret)

    return judge


def assignment(secret: str, key: str | None) -> Judged:
    """Judge for `key = value` in any syntax: the key names the kind, the value must fit it."""
    named = secret_kind_of_key(key or "")
    if named is None:
        return None
    if (key or "").lstrip().startswith("-") and named[0] == "password":
        return password_flag(secret, key) if is_password_flag(key) else _looks_assigned(secret, key)
    kind, strong = named
    lo, hi, quoted = strip_quotes(secret)
    value = secret[lo:hi]
    if is_joined(value):
        return None
    if secret.lstrip("\\").startswith("`") and any(c.isspace() for c in value):
        # `KEY=`cmd arg``: shell command substitution, the value is computed at run time
        return None
    if not quoted and is_yaml_tag(value):
        return None  # a YAML tag: `!vault |` (the value follows), `!secret http_password`, `!Ref Pw`
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
    key = (key or "").lstrip(" \t\r\n\f\v\"'=")
    judged = assignment(secret, key)
    if judged is None or key.startswith("-"):
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
    lo, hi, quoted = strip_quotes(secret)
    value = secret[lo:hi]
    if (
        len(value) < 20
        or (key is not None and echoes_key(key, value))
        or (not quoted and is_code(value))
        or is_file_path(value)
        or is_hex_digest(value)
        or is_uuid(value)
        or RESOURCE_NAME.match(value)
        or value[:4].lower() in ("sha1", "sha2", "sha5", "md5-")
    ):
        return None
    if char_classes(value.strip("=")) < 3 or not looks_random(value, min_len=20, min_bits=4.0):
        return None
    return "high_entropy_string", lo, hi


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
    lo, hi, _ = strip_quotes(secret)
    value = secret[lo:hi]
    if len(value) < 4 or is_placeholder(value) or value.startswith(("$", "%", "{")):
        return None
    return "password", lo, hi


def stated_password(secret: str, key: str | None) -> Judged:
    """Judge for prose: `the password for user 'postgres' is 'admin'`."""
    lo, hi, _ = strip_quotes(secret)
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
        lo, hi, quoted = strip_quotes(child.group(2))
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
