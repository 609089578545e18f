"""Credentials a command line, a DSN or a URL holds without a credential word anywhere near them.

    psexec \\\\host -u DOMAIN\\admin -p Kx7vR2pQ cmd      mysql -u root -pS3cret! app
    sqlcmd -S db -U sa -P 'Y0urStr0ng!'                  telegraf:Mx7#kQ2pZr@tcp(127.0.0.1:3306)/
    https://outlook.office.com/webhook/…/IncomingWebhook/4d2b…/…
    https://discord.com/api/webhooks/1234/aB3x…          https://hooks.example.com/services/T0/B0/xY7…

- `-u USER … -p VALUE` (or `-U` / `-P`, in either order, `-pVALUE` attached): a short password flag
  beside a user flag is the user's password, whatever the tool (psexec, mysql, sqlcmd, sshpass).
  A number or `host:port` after `-p` is a port (`psql -U app -p 5432`, `docker run -u 1000 -p
  8080:80`), a flag after `-u` means `-u` took no user (`cp -u -p`), and a visible reference or
  placeholder is spared (configs/names.py `spared`). `mysql -u root -p app` reads `app` as the
  password although mysql takes it as the database: redacting a database name costs a word,
  leaking a password costs a login.
- a Go database DSN (`user:password@tcp(host:3306)/db`, `@unix(/run/mysqld.sock)`): the part
  between the first colon and the `@` is the password, with no scheme in front.
- a webhook URL (a path segment or host named `webhook`, `webhooks`, `hooks`, `IncomingWebhook`):
  the path after that name is the credential when a segment of it is random (16 or more letters
  and digits, both in it), as the hook's address is its only key (`…/hooks/123/pings` and
  documentation paths have no such segment).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from worker.redaction.configs.names import spared

Span = tuple[str, int, int]

_USER = re.compile(r"(?:^|\s)-[uU][ \t]+(?!-)\S")
_PASSWORD = re.compile(r"(?:^|\s)-([pP])(?:[ \t]+(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`;&|]+)|([^\s\"'`;&|]+))")
_PORT = re.compile(r"[\d.:]+(?:/(?:tcp|udp))?")
_HOOK = re.compile(
    r"(?i)https?://(?:[^\s/\"'<>]*\bhooks\.[^\s/\"'<>]*/|[^\s\"'<>]*?/(?:incoming)?web-?hooks?/|[^\s\"'<>]*?/hooks/)"
    r"([^\s\"'<>?#`)\]]+)"
)
_RANDOM_SEGMENT = re.compile(r"[A-Za-z0-9_-]{16,}")
_DSN = re.compile(r"(?:^|[\s\"'=(\[,])[\w.-]{1,64}:([^\s\"'@]{1,128})@(?:tcp|udp|unix)\(")


def user_password_spans(line: str) -> Iterator[Span]:
    """The value of `-p` / `-P` on a line that also gives a user with `-u` / `-U`."""
    if _USER.search(line) is None:
        return
    for m in _PASSWORD.finditer(line):
        start, end = m.span(2) if m.group(2) is not None else m.span(3)
        value = line[start:end]
        if value[:1] in "\"'":
            start, end, value = start + 1, end - 1, value[1:-1]
        if not value or value.startswith("-") or _PORT.fullmatch(value) or spared(value, "password", True):
            continue
        yield "password", start, end


def dsn_spans(line: str) -> Iterator[Span]:
    """The password of a Go database DSN (`user:password@tcp(host)/db`)."""
    for m in _DSN.finditer(line):
        if not spared(m.group(1), "password", True):
            yield "password", m.start(1), m.end(1)


def webhook_spans(line: str) -> Iterator[Span]:
    """The random path of a webhook URL (its secret part)."""
    for m in _HOOK.finditer(line):
        path = m.group(1).rstrip(".,;:")
        if any(_random(s) for s in _RANDOM_SEGMENT.findall(path)):
            yield "webhook_url", m.start(1), m.start(1) + len(path)


def _random(segment: str) -> bool:
    digits = sum(c.isdigit() for c in segment)
    return digits >= 2 and sum(c.isalpha() for c in segment) >= 2
