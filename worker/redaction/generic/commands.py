"""Credentials a command line, a DSN or a URL holds without a credential word anywhere near them.

    psexec \\\\host -u DOMAIN\\admin -p Kx7vR2pQ cmd      mysql -uroot -p'S3cret!' app
    sqlcmd -S db -U sa -P 'Y0urStr0ng!'                  telegraf:Mx7#kQ2pZr@tcp(127.0.0.1:3306)/
    redis-cli -a Rd5-Pw ping                             echo -n 'Reg-Pw' | docker login --password-stdin
    https://discord.com/api/webhooks/1234/aB3x…          https://hooks.example.com/services/T0/B0/xY7…

A line is read one simple command at a time (cut at `&&`, `||`, `;`, `|` and a JSON-escaped
newline), so a flag of one command never pairs with a flag of the next:

- `-u USER … -p VALUE` (or `-U` / `-P`, in either order, `-uUSER` and `-pVALUE` attached, quoted
  or not): a short password flag beside a user flag is the user's password, whatever the tool
  (psexec, mysql, sqlcmd, mongo). A number, a range or `host:port` after `-p` is a port (`psql -U
  app -p 5432`, `docker run -u 1000 -p 8080:80`); a `-u` that belongs to sudo, doas or runuser, or
  a `-U` that belongs to pip or uv (upgrade), names no user; a variable (`$Password`, `%PW%`) or
  a visible placeholder is spared (configs/names.py `spared`). `mysql -u root -p app` reads `app`
  as the password although mysql takes it as the database: redacting a database name costs a
  word, leaking a password costs a login.
- a tool's own password flag where it is a short letter (`redis-cli -a PW`, `ldapsearch -w PW`,
  `zip -P PW`, `7z -pPW`, `openssl … -k PW`, `smbclient -U user%PW`, net-snmp's `snmpwalk -c
  COMMUNITY` and `-A`/`-X` passphrases), `net use`'s password (the
  first word after the share that is no `/switch`), and a password piped into `--password-stdin`
  (`echo -n PW | docker login --password-stdin`): what the tools' manuals say, not what the value
  looks like.
- a Go database DSN (`user:password@tcp(host:3306)/db`, `@unix(/run/mysqld.sock)`): the part
  between the first colon and the last `@` is the password, with no scheme in front; a driver's
  DSN passed with a user and a password (`DBI->connect("dbi:Pg:…", "u", "PW")`, JDBC's
  `getConnection("jdbc:…", "u", "PW")`, `new PDO("mysql:host=…", "u", "PW")`): the third argument.
- a webhook URL (a path segment or host named `webhook`, `webhooks`, `hooks`, `IncomingWebhook`):
  the path after that name is the credential when a segment of it reads as random (16 or more
  letters and digits, mixed, not words joined up), as the hook's address is its only key
  (`…/hooks/123/pings`, documentation slugs and file paths have no such segment).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from worker.redaction.configs.names import spared
from worker.redaction.generic.tokens import random_body
from worker.redaction.positions import PORT
from worker.redaction.shapes import is_wordy

Span = tuple[str, int, int]

# where one simple command ends
_SEPARATOR = re.compile(r"&&|\|\||[;|\n]|\\n")
_VALUE = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`;&|)]+)"
_USER = re.compile(r"(?:^|\s)(?:-[uU](?:[ \t]+(?!-)\S|[A-Za-z0-9_\\.]+)|--user[= ]\S)")
_VALUE_RE = re.compile(_VALUE)
# `-p VALUE` or `-pVALUE`
_PASSWORD = re.compile(rf"(?:^|\s)-[pP](?:[ \t]+({_VALUE})|({_VALUE}))")
# a `-u` / `-U` that names no user: sudo's (the user to run as), pip's and uv's (upgrade)
_NOT_USER = re.compile(r"(?:^|\s)(?:sudo|doas|runuser|pip3?|uv|pipx|install)(?:[ \t]+-\S+)*[ \t]+-[uU]\b")
_TOOL = re.compile(
    r"(?i)(?:^|[\s(`\"'\\/])(redis-cli|ldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)"
    r"|zip|unzip|zipcloak|7z|7za|7zr|rar|unrar|openssl|smbclient"
    r"|snmp(?:walk|get|getnext|bulkwalk|bulkget|set|trap|inform|table|delta|status|test|df|netstat)|trapsess)"
    r"(?:\.exe)?(?=[\s\"'])"
)
# the tool's password flag: what follows it up to the value
_TOOL_FLAG = {
    "redis-cli": re.compile(r"\s-a[ \t]+"),
    "ldap": re.compile(r"\s-w[ \t]*"),
    "zip": re.compile(r"\s-P[ \t]+"),
    "7z": re.compile(r"\s[\"']?-p(?=[^\s\"'])"),
    "openssl": re.compile(r"\s-k[ \t]+"),
    "smbclient": re.compile(r"\s(?:-U[ \t]*|--user[= ])[^\s%\"']+%"),
    # net-snmp's tools: `-c COMMUNITY` (v1, v2c), `-A AUTHPASS` and `-X PRIVPASS` (v3)
    "snmp": re.compile(r"\s-[cAX][ \t]*"),
}
# SNMP's default communities, which every example shows (spared as after `rocommunity`; the
# trap sinks' readers in entries.py too)
DEFAULT_COMMUNITIES = frozenset(["public", "private"])
_TOOL_KIND = {"unzip": "zip", "zipcloak": "zip", "7za": "7z", "7zr": "7z", "rar": "7z", "unrar": "7z"}
_NET_USE = re.compile(r"(?i)(?:^|[\s\"'\\/])net(?:\.exe)?[ \t]+use\b")
_UNC = re.compile(r"\\\\\S+")
_STDIN = re.compile(
    rf"(?:echo|printf)(?:[ \t]+-[neE]+)*(?:[ \t]+'%s(?:\\n)?')?[ \t]+({_VALUE})[ \t]*\|[^\n|]{{0,300}}?--password-stdin"
)
_DSN = re.compile(r"(?:^|[\s\"'`=(\[,])[\w.-]{1,64}:([^\s\"'`]{1,128})@(?:tcp|udp|unix)\(")
_URL = re.compile(r"https?://[^\s\"'<>`]{1,2048}")
_HOOK = re.compile(r"(?i)/(?:incoming)?web-?hooks?/|/hooks/")
_SEGMENT = re.compile(r"[A-Za-z0-9]{16,}")
_FILE = re.compile(r"\.[A-Za-z0-9]{1,5}$")


def _commands(line: str) -> Iterator[tuple[int, str]]:
    """(offset, text) of each simple command of a line."""
    pos = 0
    for m in _SEPARATOR.finditer(line):
        yield pos, line[pos : m.start()]
        pos = m.end()
    yield pos, line[pos:]


def unquoted(line: str, start: int, end: int) -> tuple[int, int]:
    """line[start:end] without the quotes around it, when the same quote opens and closes it."""
    if end - start >= 2 and line[start] in "\"'" and line[end - 1] == line[start]:
        return start + 1, end - 1
    return start, end


def user_password_spans(line: str) -> Iterator[Span]:
    """The value of `-p` / `-P` in a command that also gives a user with `-u` / `-U`."""
    for at, command in _commands(line):
        if _USER.search(command) is None or _NOT_USER.search(command) is not None:
            continue
        for m in _PASSWORD.finditer(command):
            start, end = unquoted(command, *(m.span(1) if m.group(1) is not None else m.span(2)))
            value = command[start:end]
            if value and not value.startswith("-") and not PORT.fullmatch(value) and not _stands_in(value):
                yield "password", at + start, at + end


def tool_spans(line: str) -> Iterator[Span]:
    """A tool's short password flag's value, `net use`'s password, and a password echoed into
    `--password-stdin`."""
    for at, command in _commands(line):
        m = _TOOL.search(command)
        if m is not None:
            name = m.group(1).lower()
            kind = "ldap" if name.startswith("ldap") else _TOOL_KIND.get(name, name)
            if name.startswith("snmp") or name == "trapsess":
                kind = "snmp"
            for flag in _TOOL_FLAG[kind].finditer(command, m.end()):
                value = _VALUE_RE.match(command, flag.end())
                if kind != "snmp" or value is None or value.group().strip("\"'") not in DEFAULT_COMMUNITIES:
                    yield from _value_at(command, at, flag.end())
                if kind != "snmp":
                    break  # one password flag
        if _NET_USE.search(command) is not None:
            yield from _net_use(command, at)
    for m in _STDIN.finditer(line):
        start, end = unquoted(line, *m.span(1))
        if not _stands_in(line[start:end]):
            yield "password", start, end


def _value_at(command: str, at: int, start: int) -> Iterator[Span]:
    m = _VALUE_RE.match(command, start)
    if m is None:
        return
    a, b = unquoted(command, *m.span())
    if command[b - 1 : b] in "\"'" and command[a - 1 : a] not in "\"'":
        b -= 1  # `"-pMyS3cret"`: the quote closes the flag and its value
    value = command[a:b]
    if value and not value.startswith("-") and not _stands_in(value):
        yield "password", at + a, at + b


def _net_use(command: str, at: int) -> Iterator[Span]:
    """`net use [Z:] \\\\srv\\share PASSWORD [/user:NAME]`: the first word after the share that is no
    switch (`*` asks for it)."""
    share = _UNC.search(command)
    if share is None:
        return
    for m in _VALUE_RE.finditer(command, share.end()):
        if not m.group().startswith("/"):
            start, end = unquoted(command, *m.span())
            if command[start:end] != "*" and not _stands_in(command[start:end]):
                yield "password", at + start, at + end
            return


def dsn_spans(line: str) -> Iterator[Span]:
    """The password of a Go database DSN (`user:password@tcp(host)/db`)."""
    for m in _DSN.finditer(line):
        if not _stands_in(m.group(1)):
            yield "password", m.start(1), m.end(1)


def host_userinfo_spans(line: str) -> Iterator[Span]:
    """The password of a `user:password@host:port` with no scheme (Tarantool's replication URIs,
    curl's `-x user:pw@proxy:3128`, a schemeless `http_proxy`): a port after the host says so."""
    for m in _HOST_USERINFO.finditer(line):
        if not _stands_in(m.group(1)):
            yield "password", m.start(1), m.end(1)


# a user, a password (no `@`, `/`, `:` or blank), a host name or bracketed address, a port
_HOST_USERINFO = re.compile(
    r"(?:^|(?<=[\s\"'=,(\[{]))[A-Za-z_][\w.-]{0,63}:([^\s@\"'/:]{1,128})"
    r"@(?:[A-Za-z0-9][\w-]*(?:\.[\w-]+)*|\[[0-9A-Fa-f:.]+\]):\d{1,5}(?![\w.])"
)


# a driver's DSN, then the user and the password as the next two arguments: Perl's
# `DBI->connect("dbi:Pg:…", "u", "pw")`, JDBC's `getConnection("jdbc:…", "u", "pw")`, PHP's
# `new PDO("mysql:host=…;dbname=…", "u", "pw")`, a list of the three (amavis' `['DBI:Pg:…', 'u', 'pw']`)
_DSN_ARGUMENTS = re.compile(
    r"(?i:connect\w*|getConnection|PDO|dsn\w*[ \t]*=[ \t]*\(?)[ \t]*[(\[][ \t]*"
    r"([\"'])(?i:dbi:|jdbc:|[a-z]+:(?:host|dbname|server|database)=)[^\"'\n]{1,256}\1[ \t]*,[ \t]*"
    r"([\"'])[^\"'\n]{1,128}\2[ \t]*,[ \t]*([\"'])([^\"'\s]{1,256})\3"
)


def dsn_argument_spans(line: str) -> Iterator[Span]:
    """The password after a driver DSN and a user, three arguments in a row of a connect call (or
    a DSN's list, amavis' `@lookup_sql_dsn = ( [ 'DBI:Pg:…', 'u', 'pw' ] )`)."""
    for m in _DSN_ARGUMENTS.finditer(line):
        if not _stands_in(m.group(4)):
            yield "password", m.start(4), m.end(4)


def _stands_in(value: str) -> bool:
    """A variable of the shell, PowerShell or cmd (`$Password`, `$env:PW`, `%PW%`), a value too
    short to be a password, or a visible placeholder: on a command line the value comes from
    elsewhere."""
    return len(value) < 4 or value.startswith(("$", "%")) or spared(value, "password", True)


def webhook_spans(line: str) -> Iterator[Span]:
    """The random path of a webhook URL (its secret part)."""
    for url in _URL.finditer(line):
        text = url.group().rstrip(".,;:)]")
        host_end = text.find("/", len("https://"))
        if host_end < 0:
            continue
        hook = _HOOK.search(text, host_end)
        if hook is not None:
            path_start = hook.end()
        elif text[text.index("//") + 2 :].lower().startswith("hooks."):
            path_start = host_end + 1
        else:
            continue
        path = text[path_start:].split("?", 1)[0].split("#", 1)[0]
        if path and not _FILE.search(path) and any(_random(s) for s in _SEGMENT.findall(path)):
            yield "webhook_url", url.start() + path_start, url.start() + path_start + len(path)


def _random(segment: str) -> bool:
    """A path segment that reads as a key: random by tokens.py's measure, or letters and digits
    mixed with no words making up half of it (`B00000000XyZ…`, not `useQueryClient2023v5`)."""
    if random_body(segment.encode()):
        return True
    digits = sum(c.isdigit() for c in segment)
    words = sum(len(w) for w in _WORD.findall(segment))
    return digits >= 2 and len(segment) - digits >= 2 and words < 0.5 * len(segment) and not is_wordy(segment)


_WORD = re.compile(r"[A-Z]?[a-z]{3,}")
