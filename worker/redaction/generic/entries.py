"""Credentials that are entries of something, where the credential word names the whole, not them.

    API_KEYS = {"billing": "Wn4Hs8Qk1Ld6Fz3Rp9Vt2M", "search": "…"}    SECRET_KEYS = ["…", "…"]
    user=webrtc-gw:0xd56046d533c015ddbf2627        users relay:CL:Pr0xy!Vesna2024
    "alice" MD5 "Winter2025!"                        createUser ops SHA "Noc-Readonly-Kestrel"
    ops:OBF:1fod1ino1ing1hva1tvf1z7e                 job-runner:MD5:b3be3aa83a7ead94c6f9fb7eeaf1244c,user

- a collection's values: a credential name (or its plural: `API_KEYS`) given a literal list, dict,
  set or tuple on its line (`= [`, `: {`, `=> (`, `= set(`); each quoted value in it that looks
  random is a credential (a password's: 8 or more characters, mixed, no space; other kinds': 16 or
  more), a dict's keys (a string before `:` or `=>`) are names. Validation rules, deny lists and
  token names (`["required", "min:12"]`, `{"123456", "qwerty"}`, `tokens = ["a"]`) are not random.
- a user's entry: a word that says users follow (`user`, `users`, `login`, `account`), then
  `name:SECRET` or `name:SCHEME:SECRET`. No secret: a number or a version (`1000:1000`,
  `python:3.11-slim`), the name again (`app:app`), a word (`nobody:nogroup`, `app:Staff`), a value
  with another colon (`x:1000:1000:…`, `system:serviceaccount:ns:sa`), a resource name
  (`arn:aws:iam::…`).
- an authentication method's secret, in the two user files that name it: hostapd's EAP user file
  (`"user" METHOD "password"`) and net-snmp's `createUser NAME SHA AUTHPASS [AES PRIVPASS]`; and
  an SNMP trap host's community after its version (`snmp-server host H version 2c COMMUNITY`,
  net-snmp's `trapsink H COMMUNITY` and `com2sec NAME SOURCE COMMUNITY`).
- a block's random values: a credential name alone on its line opens a block (a JSON object or
  list, a YAML mapping or list below it: Solr's `"credentials": {"admin": "HASH SALT"}`, Hydra's
  `secrets:` / `system:` / `- KEY`); its entries are named by users or systems, so a value is
  taken only when it looks random (every space-separated part of it), whatever the kind, and not
  under an entry that names an id, digest, version or address (`kid`, `n`, `integrity`, `sha`,
  `url`, `client_id`), nor a digest, UUID or URL itself; a JSON block's nested objects are not
  entered.
- a password in a scheme's encoding: `OBF:` (Jetty's obfuscation: base-36 groups of four),
  `CRYPT:` (a crypt hash), and `MD5:` with 32 hex digits as a user entry's value at the start of
  a line (`name:OBF:…`, `name: MD5:…,role`).

Values are judged as everywhere in this layer (configs/names.py `spared`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import re2

from worker.redaction.configs.names import spared
from worker.redaction.generic.commands import DEFAULT_COMMUNITIES, unquoted
from worker.redaction.generic.names import credential_name
from worker.redaction.lines import lines_from
from worker.redaction.shapes import RESOURCE_NAME, is_hex_digest, is_uuid, looks_random

Span = tuple[str, int, int]

# a name, then its operator, then a collection opening on the same line (a name starts a word: the
# search does not retry inside one)
_COLLECTION = re.compile(
    r"(?<![\w.-])([A-Za-z_][\w.-]{0,63})[\"']?[ \t]*(?:=>|:=|=|:)[ \t]*"
    r"(?:(?:set|frozenset|tuple|list|Set\.of|List\.of|Arrays\.asList)\()?[\[{(]"
)
_QUOTED = re.compile(r"\"((?:[^\"\\\n]|\\.){0,256})\"|'((?:[^'\\\n]|\\.){0,256})'")
_DICT_KEY = re.compile(r"[ \t]*(?::|=>)")
_USER_ENTRY = re.compile(
    r"(?i:\b(?:users?|user[_-]?name|login|account)\b)[\"']?[ \t]*(?:[=:][ \t]*)?[\"']?"
    r"([\w.@\\-]{1,64}):(?:(CL|CR|NT|PLAIN|OBF|CRYPT|MD5):)?([^\s,\"';\\][^\s,\"';]{3,255})"
)
# what follows `name:` and is no secret: a number, a version, a word
_GROUP = re.compile(
    r"[\d.]+|[A-Za-z_][A-Za-z_-]*|[A-Za-z]*[-_]?\d+(?:\.\d+)+[\w.-]*|\d[\w.-]*|[A-Z][a-z]+(?:[A-Z][a-z]+)+\d*"
)
_HEX_KEY = re.compile(r"0x[0-9A-Fa-f]{16,}")
_NOT_USERS = frozenset({"arn", "urn", "system", "mailto", "http", "https"})
EAP_METHODS = (
    "MD5",
    "GTC",
    "MSCHAPV2",
    "TTLS",
    "PEAP",
    "TLS",
    "PWD",
    "PAX",
    "PSK",
    "SIM",
    "AKA",
    "FAST",
    "LEAP",
    "IKEV2",
    "GPSK",
    "EKE",
)
_EAP_METHOD = "|".join(EAP_METHODS)
_EAP_USER = re.compile(
    rf"^[ \t]*\"[^\"\n]*\"[ \t]+(?:[A-Z0-9-]+,)*(?:TTLS-)?(?:{_EAP_METHOD})[ \t]+\"([^\"\n]{{1,128}})\""
)
_SNMP_VALUE = r"(?:\"([^\"\n]{1,128})\"|([^\s\"]{1,128}))"
_SNMP_USER = re.compile(
    rf"\bcreateUser[ \t]+(?:-e[ \t]+\S+[ \t]+)?\S+[ \t]+(?:MD5|SHA[\w-]*)[ \t]+{_SNMP_VALUE}"
    rf"(?:[ \t]+(?:DES|AES\w*)[ \t]+{_SNMP_VALUE})?"
)
_SCHEMED = re.compile(
    r"(?:^|[\s:=,])(?:OBF:((?:[0-9a-z]{4}){2,64})|CRYPT:([./0-9A-Za-z]{13}|\$\w{1,8}\$[./0-9A-Za-z$]{8,120}))"
    r"(?=$|[\s,;\"'])"
)
# an SNMP trap host's community (`snmp-server host 10.1.2.3 version 2c COMMUNITY`, Cisco, Arista;
# NETGEAR's `snmp host … version 2c "COMMUNITY"`)
_SNMP_HOST = re.compile(
    r"\bsnmp(?:-server)?[ \t]+host[ \t]+\S+(?:[ \t]+\S+){0,3}?[ \t]+version[ \t]+(?:1|2c)[ \t]+(?:\"([^\"\n]+)\"|([^\s\"]+))"
)
# net-snmp's trap sinks: `trapsink HOST [COMMUNITY [PORT]]` (and trap2sink, informsink)
_SNMP_SINK = re.compile(
    r"^[ \t]*(?:(?:trapsink|trap2sink|informsink)[ \t]+\S+"
    # and its community-to-name map: `com2sec [-Cn CONTEXT] NAME SOURCE COMMUNITY`
    r"|com2sec6?(?:[ \t]+-Cn[ \t]+\S+)?[ \t]+\S+[ \t]+\S+)[ \t]+([^\s#\"']+)"
)
_USER_MD5 = re.compile(r"^[ \t]*([\w.@-]{1,64}):[ \t]*MD5:([0-9a-f]{32})(?=$|[\s,;])")
_DIGEST_NAME = re.compile(r"(?i).*(?:sum|hash|digest|etag|md5|sha\d*|integrity|fingerprint)")


def collection_spans(line: str) -> Iterator[Span]:
    """The random quoted values of each literal collection given to a credential name on this line
    (a collection opened inside one already read is not read again: `secrets=(` ten thousand times
    over costs one scan, not ten thousand)."""
    read_to = 0
    for m in _COLLECTION.finditer(line):
        named = _plural_name(m.group(1)) if m.start() >= read_to else None
        end = _closing(line, m.end() - 1) if named is not None else None
        read_to = max(read_to, end if end is not None else min(len(line), m.end() + _COLLECTION_CHARS))
        if named is None or end is None or "\\" in line[m.end() : end]:
            continue  # no credential's, unclosed on this line, or escaped (`[\"a\"]`: the decoded view)
        for q in _QUOTED.finditer(line, m.end(), end):
            group = 1 if q.group(1) is not None else 2
            value = q.group(group)
            if _DICT_KEY.match(line, q.end()) or not _random_value(value, named[0]):
                continue
            yield named[0], q.start(group), q.end(group)


def _random_value(value: str, kind: str) -> bool:
    if kind == "password":
        return looks_random(value, min_len=8, min_bits=2.5) and not spared(value, kind, True)
    return looks_random(value, min_len=16, min_bits=3.0) and not spared(value, kind, False)


_COLLECTION_CHARS = 2_048


def _closing(line: str, at: int) -> int | None:
    """Where the collection opened at `at` closes, within 2,048 characters; None when it does not."""
    stop = min(len(line), at + _COLLECTION_CHARS)
    return next((i for i, depth in _brackets(line, at, stop) if depth == 0), None)


def _brackets(line: str, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """(index, depth after it) of each bracket of line[start:stop] outside quoted strings, the
    depth counted from start."""
    depth, quote = 0, ""
    for i in range(start, stop):
        c = line[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "[{(":
            depth += 1
            yield i, depth
        elif c in ")]}":
            depth -= 1
            yield i, depth


def user_entry_spans(line: str) -> Iterator[Span]:
    """`user=name:SECRET`, `users name:CL:SECRET`: the secret of a user's entry."""
    for m in _USER_ENTRY.finditer(line):
        name, scheme, secret = m.group(1), m.group(2), m.group(3)
        if scheme is None and _no_secret(name, secret):
            continue
        if not spared(secret, "password", True):
            yield "password", m.start(3), m.end(3)


def _no_secret(name: str, secret: str) -> bool:
    """`1000:1000`, `app:app`, `nobody:nogroup`, `python:3.11-slim`, `x:1000:1000:…`, `arn:aws:…`."""
    if _HEX_KEY.fullmatch(secret):
        return False  # coturn's `0x…` key
    return (
        secret == name
        or ":" in secret
        or name.lower() in _NOT_USERS
        or _GROUP.fullmatch(secret) is not None
        or RESOURCE_NAME.match(f"{name}:{secret}") is not None
    )


def method_spans(line: str) -> Iterator[Span]:
    """`"alice" MD5 "pw"` (hostapd), `createUser ops SHA "pw" AES "pw2"` (net-snmp): a user file's
    secrets after the method that checks them."""
    m = _EAP_USER.match(line)
    if m is not None and not spared(m.group(1), "password", True):
        yield "password", m.start(1), m.end(1)
    for m in _SNMP_HOST.finditer(line):
        group = 1 if m.group(1) is not None else 2
        if not spared(m.group(group), "secret", True):
            yield "secret", m.start(group), m.end(group)
    sink = _SNMP_SINK.match(line)
    # (`public`, `private`: the defaults every example shows, spared as after `rocommunity`)
    if (
        sink is not None
        and sink.group(1) not in DEFAULT_COMMUNITIES
        and not spared(sink.group(1), "secret", True)
    ):
        yield "secret", sink.start(1), sink.end(1)
    for m in _SNMP_USER.finditer(line):
        for group in (1, 2, 3, 4):
            if m.group(group) is not None and not spared(m.group(group), "password", True):
                yield "password", m.start(group), m.end(group)


def schemed_spans(line: str) -> Iterator[Span]:
    """`OBF:…`, `CRYPT:…`, a user's `MD5:<32 hex>`: a password in its scheme's encoding."""
    for m in _SCHEMED.finditer(line):
        group = 1 if m.group(1) is not None else 2
        yield "password_hash", m.start(group), m.end(group)
    md5 = _USER_MD5.match(line)
    if md5 is not None and not _DIGEST_NAME.fullmatch(md5.group(1)):
        yield "password_hash", md5.start(2), md5.end(2)


# a credential name that opens a block: nothing after it on its line but `{`, `[`, nothing or a
# YAML block scalar's `|` or `>` (`htpasswd: |`)
BLOCK_KEY = re2.compile(
    rb"(?im)^[ \t]*(?:- )?[\"']?[\w.-]*(?:secret|token|key|pass|pwd|cred|auth|pepper)[\w.-]*[\"']?[ \t]*[:=][ \t]*(?:[{\[]|[|>][-+]?[1-9]?[-+]?)?[ \t]*\r?$"
)
_BLOCK_KEY_LINE = re.compile(
    r"([ \t]*)(?:- )?[\"']?([\w.-]+)[\"']?[ \t]*[:=][ \t]*([{\[]?)([|>][-+]?[1-9]?[-+]?)?[ \t]*\r?$"
)
_BLOCK_LINES = 64
_ENTRY_KEY = re.compile(r"[\"']?([\w.@-]+)[\"']?[ \t]*:(?:[ \t]|$)")
# an entry whose name says its value is an id, a digest, a version or an address
_NAMES_NO_SECRET = re.compile(
    r"(?i)(?:.*(?:id|url|uri|host|endpoint|issuer|path|file|name|type|version|region|tenant)|kid|x5t.*|x5c|n|e|x|y|"
    r"crv|alg|kty|use|sha\d*|commit|ref|rev|revision|hash(?:es)?|digest|integrity|checksum|fingerprint|resolved)"
)
_DIGEST_VALUE = re.compile(r"(?i)(?:sha\d+|md5)[:-]|.*://")


def block_spans(text: str, starts: list[int]) -> Iterator[Span]:
    """The random values of a block a credential name opens (`credentials: {` then `"admin": "…"`
    on the lines below, `secrets:` then `system:` then `- …`): a block's entries have names of
    their own (users, systems), so only a value that looks random is taken, whatever the kind."""
    for at in starts:
        line_end = text.find("\n", at)
        head = _BLOCK_KEY_LINE.match(text, at, len(text) if line_end < 0 else line_end)
        named = None if head is None else _plural_name(head.group(2))
        if head is None or named is None or line_end < 0:
            continue
        indent, bracket = len(head.group(1).expandtabs()), head.group(3)
        passwords = named[0] == "password"
        if head.group(4) and named[1]:
            # `password: |`: a block scalar, whose text is the value itself
            yield from _scalar_lines(text, line_end + 1, indent, named[0], passwords)
        else:
            yield from _block_values(text, line_end + 1, indent, bracket, passwords)


def _scalar_lines(text: str, pos: int, indent: int, kind: str, passwords: bool) -> Iterator[Span]:
    """Each line of a YAML block scalar a credential name opens: the secret (a user's, on a
    `name:secret` line), unless it is a reference, prose or a record of fields."""
    for at, line, _depth in _block_lines(text, pos, indent, ""):
        user = _USER_SECRET.fullmatch(line) if passwords else None
        if user is not None:
            if _user_secret(user.group(2)):
                yield "password", at + user.start(2), at + user.end(2)
            continue
        value = line.strip()
        start = at + line.index(value)
        # prose (three words or more), a record of fields (`/etc/passwd`'s `nobody:x:65534:…`)
        if len(value.split()) < 3 and value.count(":") < 4 and not spared(value, kind, True):
            yield kind, start, start + len(value)


def _plural_name(name: str) -> tuple[str, bool] | None:
    """What a name names, or its singular (`API_KEYS`, `SECRET_TOKENS`: a collection's name)."""
    return credential_name(name) or (credential_name(name[:-1]) if name[-1:] in "sS" else None)


def _block_values(text: str, pos: int, indent: int, bracket: str, passwords: bool) -> Iterator[Span]:
    """passwords: a password's name opened the block (`htpasswd:`), whose `name:secret` lines are
    users' passwords whatever they look like."""
    for at, line, depth in _block_lines(text, pos, indent, bracket):
        entry = _entry(line) if depth <= 1 else None  # a JSON block's nested objects are not entered
        user = _USER_SECRET.fullmatch(line) if passwords and entry is None else None
        if entry is not None:
            yield "secret", at + entry[0], at + entry[1]
        elif user is not None and _user_secret(user.group(2)):
            yield "password", at + user.start(2), at + user.end(2)


def _block_lines(text: str, pos: int, indent: int, bracket: str) -> Iterator[tuple[int, str, int]]:
    """(start, line, bracket depth before it) of each non-blank line of the block that starts at
    pos, up to _BLOCK_LINES lines: a YAML block ends where the indentation comes back to `indent`,
    a bracketed one (`{`, `[`) where its brackets close."""
    depth = 1 if bracket else 0
    for start, _, line in lines_from(text, pos, _BLOCK_LINES):
        if line.strip():
            if not bracket and len(line) - len(line.lstrip()) <= indent:
                return
            yield start, line, depth
            if bracket:
                depth += _depth_change(line)
                if depth <= 0:
                    return


# an htpasswd-style line: a user, a colon and the secret, no blank
_USER_SECRET = re.compile(r"[ \t]*(?:- )?([\w.@-]+):([^\s:/\"'{\[][^\s:]*)[ \t\r]*")


def _user_secret(value: str) -> bool:
    """The secret of a `name:secret` line in a password block: not a number (`12:30`), a port, a
    short word, a mode word or a reference (`${PW}`)."""
    if _PORT_PATH.match(value) or (value.isalpha() and len(value) < 8):
        return False  # `host:6379/0`, `ci:lint`: a port and a path, a step's name
    return not spared(value, "password", True)


_PORT_PATH = re.compile(r"\d+(?:/|$)")


def _entry(line: str) -> tuple[int, int] | None:
    """(start, end) in line of an entry's value that looks random: `- VALUE`, `NAME: VALUE`,
    `"NAME": "VALUE",`, a trailing comment left out."""
    start = len(line) - len(line.lstrip())
    if line.startswith("- ", start):
        start += 2
    key = _ENTRY_KEY.match(line, start)
    if key is not None:
        if _plural_name(key.group(1)) or _NAMES_NO_SECRET.fullmatch(key.group(1)):
            return None  # a credential's own name (its reader takes it), or an id, a digest, a url
        start = key.end()
    stop = line.find(" #", start)
    stop = len(line) if stop < 0 else stop
    while start < stop and line[start] in " \t":
        start += 1
    while stop > start and line[stop - 1] in " \t\r,":
        stop -= 1
    start, stop = unquoted(line, start, stop)
    value = line[start:stop]
    parts = value.split()
    if not parts or not value.isascii() or any(not _random_part(part) for part in parts):
        return None
    return start, stop


def _random_part(part: str) -> bool:
    return (
        looks_random(part, min_len=16, min_bits=3.0)
        and not (is_hex_digest(part) or is_uuid(part) or _DIGEST_VALUE.match(part))
        and not spared(part, "secret", False)
    )


def _depth_change(line: str) -> int:
    """Brackets opened minus closed on a line, outside quoted strings."""
    return sum(1 if line[i] in "[{(" else -1 for i, _ in _brackets(line, 0, len(line)))
