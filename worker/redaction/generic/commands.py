"""Credentials a command line, a DSN or a URL holds without a credential word anywhere near them.

    psexec \\\\host -u DOMAIN\\admin -p Kx7vR2pQ cmd      mysql -u root -pS3cret! app
    sqlcmd -S db -U sa -P 'Y0urStr0ng!'                  telegraf:Mx7#kQ2pZr@tcp(127.0.0.1:3306)/
    https://outlook.office.com/webhook/…/IncomingWebhook/4d2b…/…
    https://discord.com/api/webhooks/1234/aB3x…          https://hooks.example.com/services/T0/B0/xY7…

- `-u USER … -p VALUE` (or `-U` / `-P`, in either order, `-pVALUE` attached): a short password flag
  beside a user flag is the user's password, whatever the tool (psexec, mysql, sqlcmd, sshpass).
  A number or `host:port` after `-p` is a port (`psql -U app -p 5432`, `docker run -u 1000 -p
  8080:80`), a flag after `-u` means `-u` took no user (`cp -u -p`), and a variable (`$Password`,
  `%PW%`) or a visible placeholder is spared (configs/names.py `spared`). `mysql -u root -p app` reads `app` as the
  password although mysql takes it as the database: redacting a database name costs a word,
  leaking a password costs a login.
- a tool's own password flag where it is a short letter (`redis-cli -a PW`, `ldapsearch -w PW`,
  `zip -P PW`, `7z -pPW`, `openssl … -k PW`, `smbclient -U user%PW`, `net use … /user:NAME PW`),
  and a password piped into `--password-stdin` (`echo PW | docker login --password-stdin`): what
  the tools' manuals say, not what the value looks like.
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
# (tools, the password's pattern after the tool's name on the same command)
_TOOL_FLAGS = (
    (r"redis-cli", r"\s-a[ \t]+"),
    (r"ldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)", r"\s-w[ \t]+"),
    (r"(?:zip|unzip|zipcloak)", r"\s-P[ \t]+"),
    (r"(?:7z|7za|7zr|rar|unrar)", r"\s-p"),
    (r"openssl", r"\s-k[ \t]+"),
    (r"smbclient", r"\s-U[ \t]*[^\s%]+%"),
    (r"net[ \t]+use", r"\s/user:\S+[ \t]+"),
)
_TOOL = re.compile(
    "|".join(
        rf"(?:^|[\s;&|(`])(?:{tool})(?:\.exe)?\b[^\n;&|]*?{flag}(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`;&|)]+)"
        for tool, flag in _TOOL_FLAGS
    )
)
_STDIN = re.compile(
    r"(?:echo|printf)[ \t]+(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`;&|)]+)[ \t]*\|[^\n|]*--password-stdin"
)
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
        if not value or value.startswith("-") or _PORT.fullmatch(value) or _stands_in(value):
            continue
        yield "password", start, end


def tool_spans(line: str) -> Iterator[Span]:
    """A tool's short password flag's value, and a password echoed into `--password-stdin`."""
    for m in (*_TOOL.finditer(line), *_STDIN.finditer(line)):
        group = next(i for i in range(1, len(m.groups()) + 1) if m.group(i) is not None)
        start, end = m.span(group)
        if line[start] in "\"'":
            start, end = start + 1, end - 1
        value = line[start:end]
        if value and not value.startswith("-") and not _stands_in(value):
            yield "password", start, end


def dsn_spans(line: str) -> Iterator[Span]:
    """The password of a Go database DSN (`user:password@tcp(host)/db`)."""
    for m in _DSN.finditer(line):
        if not _stands_in(m.group(1)):
            yield "password", m.start(1), m.end(1)


def _stands_in(value: str) -> bool:
    """A variable of the shell, PowerShell or cmd (`$Password`, `$env:PW`, `%PW%`) or a visible
    placeholder: on a command line the value comes from elsewhere."""
    return value.startswith(("$", "%")) or spared(value, "password", True)


def webhook_spans(line: str) -> Iterator[Span]:
    """The random path of a webhook URL (its secret part)."""
    for m in _HOOK.finditer(line):
        path = m.group(1).rstrip(".,;:")
        if any(_random(s) for s in _RANDOM_SEGMENT.findall(path)):
            yield "webhook_url", m.start(1), m.start(1) + len(path)


def _random(segment: str) -> bool:
    digits = sum(c.isdigit() for c in segment)
    return digits >= 2 and sum(c.isalpha() for c in segment) >= 2
