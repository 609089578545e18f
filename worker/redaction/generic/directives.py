"""Credentials after a name and whitespace: daemon directives, answer files, router configs, headers.

    auth_pass Kx7vR2pQ                       requirepass s3cret
    sentinel auth-pass mymaster Qm9v…        rootpw --plaintext hunter2
    enable secret 5 $1$Q0Zl$…                username bob password 7 107D3D23…
    snmp-server community SoMeThing RW 99    d-i passwd/user-password password vagrant
    proxy_set_header Authorization "Basic …";  RequestHeader set X-Api-Token tok_…

The name is any token that names a credential (names.py) among a line's first words; the value
is what follows it: a quoted string, or the one token after the name once flags (`--plaintext`),
an encryption type (`0`, `5`, `7`) and a type word (`password`, `string`) are skipped. Where
several tokens follow (`auth-pass <master> <password>`), the first that could be a secret (a
digit or symbol in it; not a number, address or mode word); none such, no
value (`secret IP addresses` in a table's heading). A line that reads as prose or code (`the
password is`, `return token`, `if secret:`, `* Token usage`) has no directive: a name that is a
plain word takes a word as its value only when it starts the line in lower case and the value
ends it (`password vagrant`). A computed value (a call, an attribute) is none. Only a visible reference or
placeholder is spared (configs/names.py `spared`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from worker.redaction.configs.names import spared
from worker.redaction.generic.names import credential_name
from worker.redaction.positions import authorization

Span = tuple[str, int, int]

_TOKEN = re.compile(r"\S+")
_NAME = re.compile(r"[A-Za-z_][\w.@/-]*")
# words of prose and of code that say a line is no directive
_PROSE = frozenset(
    [
        "the",
        "a",
        "an",
        "to",
        "is",
        "are",
        "be",
        "been",
        "of",
        "for",
        "with",
        "and",
        "or",
        "not",
        "if",
        "it",
        "its",
        "this",
        "that",
        "these",
        "your",
        "you",
        "in",
        "on",
        "by",
        "as",
        "at",
        "from",
        "will",
        "can",
        "must",
        "should",
        "may",
        "use",
        "used",
        "uses",
        "when",
        "which",
        "was",
        "were",
        "has",
        "have",
        "no",
        "into",
        "than",
        "then",
        "only",
        "also",
        "all",
        "any",
        "each",
        "such",
        "do",
        "does",
        "set",
        "sets",
    ]
)
_CODE = frozenset(
    [
        "return",
        "if",
        "elif",
        "else",
        "while",
        "for",
        "def",
        "class",
        "import",
        "from",
        "let",
        "const",
        "var",
        "print",
        "assert",
        "not",
        "and",
        "or",
        "in",
        "is",
        "with",
        "yield",
        "await",
        "raise",
        "except",
        "new",
        "typeof",
        "del",
        "lambda",
        "case",
        "switch",
        "fn",
        "func",
        "function",
        "pub",
        "struct",
        "type",
        "interface",
        "async",
        "static",
        "private",
        "public",
        "protected",
        "final",
        "val",
    ]
)
_CREDENTIAL_WORDS = frozenset(
    [
        "password",
        "passwords",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "tokens",
        "credential",
        "credentials",
        "key",
        "keys",
        "auth",
        "community",
        "pass",
    ]
)
# tokens skipped before a directive's value: types and encodings of the value
# words that say what form the value after them takes (`password hash X`, `key plaintext X`)
_TYPE_WORDS = frozenset(
    ["password", "string", "plain", "plaintext", "cleartext", "text", "hash", "encrypted"]
)
# algorithms named before a value (`auth md5 encrypted X`, `priv aes 128 X`): what it is, not it
_ALGORITHMS = frozenset(
    [
        "md5",
        "sha",
        "sha1",
        "sha224",
        "sha256",
        "sha384",
        "sha512",
        "des",
        "3des",
        "aes",
        "aes128",
        "aes192",
        "aes256",
    ]
)
_MODE = frozenset(
    [
        "ro",
        "rw",
        "rwx",
        "default",
        "primary",
        "secondary",
        "master",
        "slave",
        "on",
        "off",
        "yes",
        "no",
        "true",
        "false",
        "none",
        "any",
        "all",
        "local",
        "systemonly",
        "required",
        "optional",
    ]
)
_COMMENT = re.compile(r"^(?:#|;|//|!|--)")
# a comment after a directive's value (`--` there is a flag)
_TRAILING_COMMENT = re.compile(r"^(?:#|;|//)")
_ADDRESS = re.compile(
    r"^(?:\d{1,3}(?:\.\d{1,3}){3}(?:/\d+)?|[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}|[\w-]+(?:\.[\w-]+)+|\[[\w:.]+\])$"
)
_MAX_BEFORE = 5  # words before the name: `snmp-server community`, `ppp pap sent-username auser password`
_MAX_WORDS = 12
_MAX_LINE_CHARS = 300  # a directive is a short line; a JSONL record or minified code is none
# an unquoted value is one run without quotes, brackets or braces (`x"},"caller":{…` is JSON)
# (`{SSHA}…`, `{SHA}…`: a hash's scheme before it)
_BARE_VALUE = re.compile(r"(?:\{[A-Z0-9-]{2,12}\})?[^\s\"'`{}()\[\]<>]+")
_TEMPLATE_OPEN = ("{{", "{%", "${", "<%")


_WORD_LIST = re.compile(r"[a-z]+(?:,[a-z]+)+")


def _could_be_secret(token: str) -> bool:
    """A token among several that could be a credential: a digit or a symbol in it, and not a
    number, address, flag or mode word (`min-length`, `audit-trail` have neither)."""
    if token.isdigit() or _ADDRESS.match(token) or token.startswith("-") or token.lower() in _MODE:
        return False
    if _WORD_LIST.fullmatch(token):
        return False  # `log,execute,net`: a list of modes (net-snmp's `authCommunity TYPES COMMUNITY`)
    return any(c.isdigit() for c in token) or any(not c.isalnum() and c not in "-_." for c in token)


def _is_computed(value: str) -> bool:
    """A value code computes (`System.getenv("X")`, `settings.db.password`): no literal credential."""
    return bool(_CALL.search(value) or _DOTTED.fullmatch(value))


_CALL = re.compile(r"^[A-Za-z_$][\w$.]*\(")
_DOTTED = re.compile(r"[A-Za-z_$]+(?:\.[A-Za-z_$]+)+")


def _quoted_at(line: str, start: int) -> tuple[int, int] | None:
    """The span inside the quoted string that starts at line[start], if it closes on the line."""
    quote = line[start]
    end = line.find(quote, start + 1)
    return (start + 1, end) if end > start + 1 else None


def _after_algorithm(tokens: list[re.Match[str]]) -> bool:
    """Whether the words after a name say which algorithm its value is for (`auth sha X`): then an
    `auth`'s value is a secret whatever it looks like (a `key sha1 …`'s is a checksum)."""
    return len(tokens) > 1 and tokens[0].group().lower() in _ALGORITHMS


def _value(line: str, tokens: list[re.Match[str]], algorithms: bool = False) -> tuple[int, int] | None:
    """(start, end) in line of a directive's value among the tokens after its name; algorithms: an
    algorithm's name before it is skipped too (`auth sha X`; `key sha1 HEX` is a checksum)."""
    while tokens and (
        tokens[0].group().startswith("-")
        or (len(tokens[0].group()) == 1 and tokens[0].group().isdigit())
        or (tokens[0].group().lower() in _TYPE_WORDS and len(tokens) > 1)
        or (algorithms and tokens[0].group().lower() in _ALGORITHMS and len(tokens) > 1)
    ):
        tokens = tokens[1:]
    cut = next((j for j, t in enumerate(tokens) if t.group().startswith("(")), len(tokens))
    tokens = tokens[:cut]  # `(or secondary)`: an aside, not a value
    if not tokens or tokens[0].group() == "-":
        return None  # `secrets - what this file holds`: a description
    first = tokens[0]
    if first.group()[0] in "\"'":
        return _quoted_at(line, first.start())
    if len(tokens) == 1:
        chosen = first
    else:
        candidates = [t for t in tokens if _could_be_secret(t.group().rstrip(";,"))]
        if not candidates:
            return None
        chosen = candidates[0]
    start, end = chosen.span()
    while end > start and line[end - 1] in ";,":
        end -= 1
    return (start, end) if _BARE_VALUE.fullmatch(line, start, end) else None


def _reads_as_prose(words: list[str]) -> bool:
    return sum(w.lower().strip(",.:;") in _PROSE for w in words) >= 2 or words[-1].endswith(
        (".", "?", "!", ":")
    )


def directive_spans(line: str) -> Iterator[Span]:
    """The credential of a line that is a directive: a credential name, then its value; else a
    compound name's value deeper in a long line of names and values."""
    if len(line) > _MAX_LINE_CHARS:
        return
    tokens = list(_TOKEN.finditer(line))
    short = len(tokens) <= _MAX_WORDS
    if tokens and _COMMENT.match(tokens[0].group()):
        tokens = tokens[1:]
    found = list(_directive(line, tokens)) if short else []
    yield from found or _inline(line, tokens)


def _inline(line: str, tokens: list[re.Match[str]]) -> Iterator[Span]:
    """A compound credential name anywhere in a line of names and values, and the token right after
    it when that could be a secret (a router's `… encrypt_type aes shared_key Pelican-Dune-2230
    rekey_int 0`): a name of several words joined by `_`, `-` or `.`; a plain word (`password`)
    only with a quoted value right after it, in any line (fetchmail's `poll h user 'me' there with
    password 'fetch-pw' is 'me' here`)."""
    words = [t.group() for t in tokens]
    if len(words) < 2:
        return
    for i, name in enumerate(words[:-1]):
        if _NAME.fullmatch(name) and words[i + 1][:1] in "\"'":
            named = credential_name(name)
            if named is not None:
                yield from _quoted_after(line, tokens, i, named)
                continue
    if _reads_as_prose(words) or any(w in _CODE for w in words[:2]):
        return
    for i, name in enumerate(words[:-1]):
        if not _COMPOUND.fullmatch(name) or (i and words[i - 1].startswith("-")):
            continue
        named = credential_name(name)
        if named is None or not named[1]:
            continue
        value = words[i + 1].rstrip(";,")
        if _could_be_secret(value) and _BARE_VALUE.fullmatch(value):
            start = tokens[i + 1].start()
            yield from _judged(line, named, start, start + len(value))


_COMPOUND = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.-][A-Za-z0-9]+)+")


def _directive(line: str, tokens: list[re.Match[str]]) -> Iterator[Span]:
    found = _named(tokens)
    if found is None or len(tokens) < 2:
        return
    i, named = found
    words = [t.group() for t in tokens]
    if len(words) == i + 3 and words[i + 1].lower().rstrip(":") in ("is", "was"):
        yield from _stated(line, named, tokens[i + 2])
        return
    if _reads_as_prose(words) or any(w in _CODE for w in words[:2]):
        yield from _quoted_after(line, tokens, i, named)
        return
    name = words[i]
    if named is _HEADER_NAME:
        yield from _header(line, tokens[i].end())
        return
    before = words[i - 1] if i else ""
    if before.startswith("-") or before.endswith(_TEMPLATE_OPEN):
        return  # `--password secret shop`: a flag's value; `{{ rabbit_pass }}`: a template
    rest = tokens[i + 1 :]
    rest = rest[: next((j for j, t in enumerate(rest) if _TRAILING_COMMENT.match(t.group())), len(rest))]
    if rest and rest[0].group() in ("=", ":", "=>", ":="):
        return  # a key/value pair: pairs.py reads those
    value = _value(line, rest, algorithms=named[0] == "credential")
    if value is None or (_is_word(name) and not _stands_alone(line, tokens, i, value)):
        return
    if named[0] == "credential" and _after_algorithm(rest) and _could_be_secret(line[value[0] : value[1]]):
        named = (named[0], True)  # `auth sha Auth-Pw-1234`: a bare `auth` named by its algorithm
    yield from _judged(line, named, *value)


def _quoted_after(line: str, tokens: list[re.Match[str]], i: int, named: tuple[str, bool]) -> Iterator[Span]:
    """In a line of many words, a password's quoted value right after its name: fetchmail's `poll h
    user 'me' there with password 'fetch-pw' is 'me' here` reads like prose, and is none."""
    if named[0] != "password" or not named[1] or i + 1 >= len(tokens):
        return  # a password's name only: `secrets "db-creds-2" not found` names a resource
    quoted = _quoted_at(line, tokens[i + 1].start()) if tokens[i + 1].group()[0] in "\"'" else None
    value = line[quoted[0] : quoted[1]] if quoted is not None else ""
    # a word alone is prose's (`secret is password 'quickstartUser'`): a digit or symbol, no blank
    if quoted is not None and _could_be_secret(value) and not any(c.isspace() for c in value):
        yield from _judged(line, named, *quoted)


def _stated(line: str, named: tuple[str, bool], token: re.Match[str]) -> Iterator[Span]:
    """`# Password is: Tannenbaum#7.`: the value a line states (a full stop ends the sentence); a
    word without a digit or symbol is prose (`token was revoked`)."""
    value = token.group().rstrip(".,;")
    if _could_be_secret(value) and _BARE_VALUE.fullmatch(value):
        yield from _judged(line, named, token.start(), token.start() + len(value))


# what `_named` returns for an `Authorization` header name
_HEADER_NAME = ("authorization", True)


def _named(tokens: list[re.Match[str]]) -> tuple[int, tuple[str, bool]] | None:
    """The first of a line's first words that names a credential, and what it names."""
    for i, token in enumerate(tokens[: _MAX_BEFORE + 1]):
        name = token.group()
        if _NAME.fullmatch(name) is None:
            continue
        if name.lower() in ("authorization", "proxy-authorization"):
            return i, _HEADER_NAME
        named = credential_name(name)
        if named is not None:
            return i, named
    return None


def _is_word(name: str) -> bool:
    """A name that is a plain English word (`password`, `Token`, `credential`): prose uses it too."""
    return name.isalpha() and name.lower() in _CREDENTIAL_WORDS


def _stands_alone(line: str, tokens: list[re.Match[str]], i: int, found: tuple[int, int]) -> bool:
    """Whether a plain-word name and its value are a directive, not prose (`* Token usage`,
    `Reduce token usage`): a value with a digit or symbol is; a word value only when the name
    starts the line in lower case and the value ends it (`password vagrant`)."""
    value = line[found[0] : found[1]]
    if not value.isalpha():
        return True
    return i == 0 and tokens[i].group().islower() and found[1] == tokens[-1].end()


def _judged(line: str, named: tuple[str, bool], start: int, end: int) -> Iterator[Span]:
    kind, strong = named
    value = line[start:end]
    if ":" in value and kind == "credential":
        # `stats auth admin:s3cret`: a user and a password
        user, _, password = value.partition(":")
        if user and password and _NAME.fullmatch(user):
            start, value, kind, strong = start + len(user) + 1, password, "password", True
    if "://" in value:
        return  # `Token https://host/settings/tokens`: where a credential is made, not one
    if (
        value.lower() in _PROSE
        or value.lower() in _MODE
        or _is_computed(value)
        or spared(value, kind, strong)
    ):
        return
    yield kind, start, start + len(value)


def _header(line: str, at: int) -> Iterator[Span]:
    """An `Authorization` header set by a directive: `proxy_set_header Authorization "Basic …";`."""
    rest = line[at:].strip()
    lead = len(line) - len(line[at:].lstrip())
    if rest[:1] in "\"'":
        rest, lead = rest[1:], lead + 1
    rest = re.split(r"[\"']", rest, maxsplit=1)[0].rstrip(";")
    judged = authorization(rest, None)
    if judged is not None:
        yield judged[0], lead + judged[1], lead + judged[2]


# `--api-token X`, `-Password X`, `--db-pass=X`: a flag whose name names a credential, then its value
_FLAG = re.compile(r"(?:^|[\s\"'=])(--?)([A-Za-z][\w.-]*)(=|[ \t]+)(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`;&|)]+)")
# a short password flag with its value attached: `-pSecr3t`, `-p4ssw0rd`, `-wLd4p` (not `-password`)
_ATTACHED = re.compile(r"[pPw](?:[A-Z]|[a-z]*\d)")
# `X-Upstream-Token: v`, `Private-Token: v` (a header's name: capitalised words joined by `-`)
# (`Authorization:` is the positions' own detector's, with its schemes)
_HEADER = re.compile(r"\b((?:[A-Z][A-Za-z0-9]*-)+[A-Z][A-Za-z0-9]*):[ \t]*([^\s\"'`\\,;<>]+)")


def flag_spans(line: str) -> Iterator[Span]:
    """The value of a credential flag (`--api-token X`, `--db-pass=X`), anywhere on a line that is
    no prose; a metavar (`--password PASSWORD`) is none."""
    if _reads_as_prose(line.split() or [""]):
        return
    for m in _FLAG.finditer(line):
        if m.group(1) == "-" and _ATTACHED.match(m.group(2)):
            continue  # `-pSecr3tPw`, `-pS3cret`: a one-letter flag and its value, not a flag's name
        named = credential_name(m.group(2))
        if named is None:
            continue
        value, start = m.group(4), m.start(4)
        if value[0] in "\"'":
            value, start = value[1:-1], start + 1
        if value.startswith("-") or (m.group(3) != "=" and value.lower() in _PROSE):
            continue
        if value.isupper() and value.replace("_", "").isalpha():
            continue  # a metavar in help text
        yield from _judged(line, named, start, start + len(value))


def keyword_spans(line: str) -> Iterator[Span]:
    """A keyword and a quoted string in a map: EDN and Clojure `{:username "u" :passphrase "…"}`,
    wherever in the line (`:password` alone is read by the bare-password rule too)."""
    for m in _KEYWORD_PAIR.finditer(line):
        named = credential_name(m.group(1))
        # a string with a blank or without a digit or symbol is code's text (`(str :token " expired")`,
        # `{:password "missing"}`), not a value
        if named is not None and _could_be_secret(m.group(2)) and not any(c.isspace() for c in m.group(2)):
            yield from _judged(line, named, m.start(2), m.end(2))


# `:name "value"`: a keyword starts the line or follows a blank or an opening bracket or comma
_KEYWORD_PAIR = re.compile(r"(?:^|(?<=[\s{(\[,])):([A-Za-z][\w.*+!?/-]*)[ \t]+\"((?:[^\"\\\n]|\\.)+)\"")


def header_spans(line: str) -> Iterator[Span]:
    """The value of a header whose name names a credential (`-H "X-Upstream-Token: v"`)."""
    for m in _HEADER.finditer(line):
        named = credential_name(m.group(1))
        if named is not None:
            yield from _judged(line, named, m.start(2), m.end(2))
