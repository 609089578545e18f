"""Credentials that are entries of something, where the credential word names the whole, not them.

    API_KEYS = {"billing": "Wn4Hs8Qk1Ld6Fz3Rp9Vt2M", "search": "…"}    SECRET_KEYS = ["…", "…"]
    user=webrtc-gw:0xd56046d533c015ddbf2627        users relay:CL:Pr0xy!Vesna2024
    "alice" MD5 "Winter2025!"                        createUser ops SHA "Noc-Readonly-Kestrel"
    ops:OBF:1fod1ino1ing1hva1tvf1z7e                 job-runner:MD5:b3be3aa83a7ead94c6f9fb7eeaf1244c,user

- a collection's values: a credential name (or its plural: `API_KEYS`) given a literal list, dict
  or tuple on its line; each
  quoted value in it is a credential (a dict's keys, a string followed by `:`, are names). A
  password's values are passwords whatever they look like; other kinds' must look random (a
  token name's list, `tokens = ["a", "b"]`, is no secret).
- a user's entry: a word that says users follow (`user`, `users`, `login`, `account`), then
  `name:SECRET` or `name:SCHEME:SECRET`. A number (`1000:1000`, a uid and a gid), the name again
  (`app:app`) or a lower-case word (`nobody:nogroup`) after the colon is a group, no secret.
- an authentication method's secret: an upper-case method name (`MD5`, `SHA`, `SHA-256`,
  `MSCHAPV2`, `GTC`, `PAP`, `CHAP`, `AES`, `DES`) after the user it belongs to, then a quoted
  value: hostapd's EAP user file, net-snmp's `createUser`.
- a block's random values: a credential name alone on its line opens a block (a JSON object or
  list, a YAML mapping or list below it: Solr's `"credentials": {"admin": "HASH SALT"}`, Hydra's
  `secrets:` / `system:` / `- KEY`); its entries are named by users or systems, so a value is
  taken only when it looks random (every space-separated part of it), whatever the kind.
- a password in a scheme's encoding: `OBF:` (Jetty's obfuscation), `CRYPT:`, and `MD5:` with 32
  hex digits, as a user entry's value (`name:OBF:…`, `name: MD5:…,role`).

Values are judged as everywhere in this layer (configs/names.py `spared`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import re2

from worker.redaction.configs.names import spared
from worker.redaction.generic.names import credential_name
from worker.redaction.shapes import looks_random

Span = tuple[str, int, int]

# a name, then its operator, then a collection opening on the same line
# (a name starts a word: the search does not retry inside one)
_COLLECTION = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]{0,63})[\"']?\s*(?:=>|:=|=|:)\s*(?:[\w.]+\()?\s*[\[{(]")
_QUOTED = re.compile(r"\"((?:[^\"\\\n]|\\.){1,256})\"|'((?:[^'\\\n]|\\.){1,256})'")
_USER_ENTRY = re.compile(
    r"(?i:\b(?:users?|user_?name|login|account)\b)[ \t]*[=:]?[ \t]*[\"']?"
    r"([\w.@\\-]{1,64}):(?:(CL|CR|NT|PLAIN|OBF|CRYPT|MD5):)?([^\s,\"';\\][^\s,\"';]{3,255})"
)
_GROUP = re.compile(r"[\d:]+|[a-z_][a-z0-9_-]*")
_METHOD = re.compile(
    r"\S[ \t]+(?:MD5|SHA(?:-?(?:1|224|256|384|512))?|MSCHAPV2|MSCHAP|GTC|PAP|CHAP|AES(?:128|192|256)?|DES)"
    r"[ \t]+\"([^\"\n]{1,128})\""
)
_SCHEMED = re.compile(
    r"(?:^|[\s:=,])(?:OBF:([0-9a-z]{8,256})|CRYPT:(\S{8,128})|MD5:([0-9a-f]{32}))(?=$|[\s,;\"'])"
)


def collection_spans(line: str) -> Iterator[Span]:
    """The quoted values of a literal collection given to a credential name on this line."""
    for m in _COLLECTION.finditer(line):
        name = m.group(1)
        # `API_KEYS`, `SECRET_TOKENS`: a collection's name is a plural
        named = credential_name(name) or (credential_name(name[:-1]) if name[-1:] in "sS" else None)
        if named is None:
            continue
        kind = named[0]
        end = _closing(line, m.end() - 1)
        if end is None or "\\" in line[m.end() : end]:
            return  # unclosed on this line, or escaped (`[\"a\"]`): the decoded view reads it
        for q in _QUOTED.finditer(line, m.end(), end):
            group = 1 if q.group(1) is not None else 2
            value = q.group(group)
            if line[q.end() :].lstrip().startswith(":"):
                continue  # a dict's key
            password = kind == "password" and len(value) >= 4
            if spared(value, kind, True) or not (password or looks_random(value, min_len=16, min_bits=3.0)):
                continue
            yield kind, q.start(group), q.end(group)
        return


def _closing(line: str, at: int) -> int | None:
    """Where the collection opened at `at` closes (brackets outside quoted strings counted), within
    2,048 characters; None when it does not."""
    depth, quote = 0, ""
    for i in range(at, min(len(line), at + 2_048)):
        c = line[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "[{(":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def user_entry_spans(line: str) -> Iterator[Span]:
    """`user=name:SECRET`, `users name:CL:SECRET`: the secret of a user's entry."""
    for m in _USER_ENTRY.finditer(line):
        name, scheme, secret = m.group(1), m.group(2), m.group(3)
        if scheme is None and (secret == name or _GROUP.fullmatch(secret)):
            continue  # `1000:1000`, `app:app`, `nobody:nogroup`: a group
        if not spared(secret, "password", True):
            yield "password", m.start(3), m.end(3)


def method_spans(line: str) -> Iterator[Span]:
    """`"alice" MD5 "pw"`, `createUser ops SHA "pw" AES`: the quoted secret after a method name."""
    for m in _METHOD.finditer(line):
        if not spared(m.group(1), "password", True):
            yield "password", m.start(1), m.end(1)


def schemed_spans(line: str) -> Iterator[Span]:
    """`OBF:…`, `CRYPT:…`, `MD5:<32 hex>`: a password in its scheme's encoding."""
    for m in _SCHEMED.finditer(line):
        group = next(i for i in (1, 2, 3) if m.group(i) is not None)
        yield "password_hash", m.start(group), m.end(group)


# a credential name that opens a block: nothing after it on its line but `{`, `[` or nothing (YAML)
BLOCK_KEY = re2.compile(
    rb"(?im)^[ \t]*(?:- )?[\"']?[\w.-]*(?:secret|token|key|pass|pwd|cred|auth|pepper)[\w.-]*[\"']?[ \t]*[:=][ \t]*[{\[]?[ \t]*\r?$"
)
_BLOCK_KEY_LINE = re.compile(r"([ \t]*)(?:- )?[\"']?([\w.-]+)[\"']?[ \t]*[:=][ \t]*([{\[]?)[ \t]*\r?$")
_ENTRY = re.compile(
    r"[ \t]*(?:-[ \t]+)?(?:[\"']?([\w.@-]+)[\"']?[ \t]*:[ \t]*)?([\"']?)([^\"'\n#]+?)\2[ \t]*,?[ \t]*\r?$"
)
_BLOCK_LINES = 64


def block_spans(text: str, starts: list[int]) -> Iterator[Span]:
    """The random values of a block a credential name opens (`credentials: {` then `"admin": "…"`
    on the lines below, `secrets:` then `system:` then `- …`): a block's entries have names of
    their own (users, systems), so only a value that looks random is taken, whatever the kind."""
    for at in starts:
        line_end = text.find("\n", at)
        head = _BLOCK_KEY_LINE.match(text, at, len(text) if line_end < 0 else line_end)
        if head is None or _plural_name(head.group(2)) is None or line_end < 0:
            continue
        indent, bracket = len(head.group(1).expandtabs()), head.group(3)
        yield from _block_values(text, line_end + 1, indent, bracket)


def _random(part: str) -> bool:
    return looks_random(part, min_len=16, min_bits=3.0) and not spared(part, "secret", False)


def _plural_name(name: str) -> tuple[str, bool] | None:
    return credential_name(name) or (credential_name(name[:-1]) if name[-1:] in "sS" else None)


def _block_values(text: str, pos: int, indent: int, bracket: str) -> Iterator[Span]:
    depth = 1 if bracket else 0
    for _ in range(_BLOCK_LINES):
        if pos >= len(text):
            return
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        line = text[pos:end]
        if line.strip():
            if not bracket and len(line) - len(line.lstrip()) <= indent:
                return  # YAML: the block ends where the indentation comes back
            m = _ENTRY.fullmatch(line)
            if m is not None and not (m.group(1) and _plural_name(m.group(1))):
                value = m.group(3).strip()
                parts = value.split()
                if parts and all(_random(part) for part in parts):
                    start = pos + m.start(3)
                    yield "secret", start, start + len(m.group(3).rstrip())
            if bracket:
                depth += sum(line.count(c) for c in "[{") - sum(line.count(c) for c in "]}")
                if depth <= 0:
                    return
        pos = end + 1
