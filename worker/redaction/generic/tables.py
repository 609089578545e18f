"""Where the text itself says where the credential is: a table's header, a format's template.

A column that a table's header names: each row's value under a credential column.

    # client    server      secret                  IP addresses        (pppd's chap-secrets)
    branch-gw   pppoe-gw    "Wicker7-Sable-Lane"    10.44.0.18
    TOKEN                     TTL   EXPIRES   USAGES                    (kubeadm token list)
    abcdef.0123456789abcdef   23h   …

No word names a credential on the rows, only in the header above them. A header is a line of 3
to 8 words of letters only, a comment's (`# `) or all upper case, none of them prose, exactly one
naming a credential (generic/names.py); the rows are the lines right below it (comments skipped)
until a blank line or a line that does not fit: at least as many fields as the credential's column
needs, none of them up to it a word of prose (a row's last column may hold a description). A field
is a quoted string or a run without blanks.

A format a comment spells out with placeholders, then the lines of that form below it:

    #  <username>: <password>[,<rolename> ...]                   (a Jetty realm)
    admin:Rund3ck-Ops-Harbor,user,admin
    #   user_<account>_<user> = <key> [group] [group] [...]     (Swift's tempauth)
    user_test_tester = Copper!Finch88 .admin

A template has two placeholders or more and exactly one naming a credential (none named `value`:
`<key> = <value>` is a pair's layout, not a credential's), which holds a credential whatever it
looks like; what follows `[` is optional and read only for the punctuation that ends the value. Each line of the template's form among the 64 lines
below it (comments skipped) gives its value at the credential's place.

Values are judged as everywhere (configs/names.py `spared`); `@/path` (pppd's "the secret is in
this file") is a reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import re2

from worker.redaction.configs.names import spared
from worker.redaction.generic.names import credential_name

Span = tuple[str, int, int]

# a line that may be a table's header: words of letters, one of them a credential's
HEAD = re2.compile(
    rb"(?im)^[ \t]*(?:#[ \t]*)?(?:[a-z]+[ \t]+){0,7}(?:secrets?|passwords?|passwd|pass|passphrase|"
    rb"tokens?|psk|pwd|keys?)(?:[ \t]+[a-z]+){0,7}[ \t]*\r?$"
)
_FIELD = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+")
_ROWS = 64
# words of prose in a comment: a sentence about secrets, no header (`# Secrets for authentication`)
_PROSE = frozenset(
    [
        "the",
        "a",
        "an",
        "for",
        "to",
        "is",
        "are",
        "of",
        "in",
        "on",
        "with",
        "and",
        "or",
        "your",
        "this",
        "using",
    ]
)


def table_spans(text: str, heads: list[int]) -> Iterator[Span]:
    """The credentials under the credential column of each header that starts at an offset of heads."""
    for at in heads:
        end = text.find("\n", at)
        if end < 0:
            continue
        column = _column(text[at:end])
        if column is not None:
            yield from _rows(text, end + 1, *column)


def _column(line: str) -> tuple[int, str, bool] | None:
    """(index of the credential's column, kind, strong) of a header line."""
    comment = line.lstrip().startswith("#")
    words = line.strip().lstrip("#").split()
    if not 3 <= len(words) <= 8 or not (comment or line.isupper()):
        return None
    if any(w.lower() in _PROSE for w in words):
        return None
    named = [(i, n) for i, w in enumerate(words) if (n := credential_name(w)) is not None]
    if len(named) != 1:
        return None
    i, (kind, strong) = named[0]
    return i, kind, strong


def _rows(text: str, pos: int, column: int, kind: str, strong: bool) -> Iterator[Span]:
    for _ in range(_ROWS):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        line = text[pos:end]
        if line.lstrip().startswith("#"):
            pos = end + 1
            continue
        fields = list(_FIELD.finditer(line))
        if len(fields) <= column or any(f.group().lower() in _PROSE for f in fields[: column + 1]):
            return  # a blank line, prose or another table: the rows have ended
        field = fields[column]
        start, stop = field.span()
        if field.group()[0] in "\"'":
            start, stop = start + 1, stop - 1
        value = line[start:stop]
        if stop > start and not value.startswith("@/") and not spared(value, kind, strong):
            yield kind, pos + start, pos + stop
        pos = end + 1
        if pos > len(text):
            return


# a comment that spells out a format with a credential's placeholder in it
TEMPLATE = re2.compile(
    rb"(?m)^[ \t]*(?:#|;|//|--|!)[^\n<]*<[\w-]+>[^\n]*<(?i:[\w-]*(?:pass|pwd|secret|token|key|psk|cred|auth)[\w-]*)>"
    rb"|(?m)^[ \t]*(?:#|;|//|--|!)[^\n<]*<(?i:[\w-]*(?:pass|pwd|secret|token|key|psk|cred|auth)[\w-]*)>[^\n]*<[\w-]+>"
)
_PLACEHOLDER = re.compile(r"<([A-Za-z][\w-]*)>")
_COMMENTED = re.compile(r"[ \t]*(?:#|;|//|--|!)[ \t]*")


def template_spans(text: str, starts: list[int]) -> Iterator[Span]:
    """The credentials of the lines below each template that starts at an offset of starts."""
    for at in starts:
        end = text.find("\n", at)
        if end < 0:
            continue
        form = _form(text[at:end])
        if form is not None:
            yield from _formed(text, end + 1, *form)


def _form(line: str) -> tuple[re.Pattern[str], str, bool] | None:
    """(pattern of a line of the form, kind, strong) of a template comment: strong, as the
    template says the place holds the credential (`<key>` too, which alone says little)."""
    body = line[_COMMENTED.match(line).end() :]  # type: ignore[union-attr]  # TEMPLATE matched it
    head, bracket, optional = body.partition("[")
    names = _PLACEHOLDER.findall(head)
    if len(_PLACEHOLDER.findall(body)) < 2 or any(n.lower() in ("value", "val", "values") for n in names):
        return None
    named = [(n, k) for n in names if (k := credential_name(n)) is not None]
    if len(named) != 1:
        return None
    secret, (kind, _) = named[0]
    stop = optional[:1] if bracket and optional[:1] in _STOPS else ""
    parts, pos = [r"[ \t]*"], 0
    for m in _PLACEHOLDER.finditer(head):
        parts.append(_literal(head[pos : m.start()], between=pos > 0))
        after = head[m.end() :].lstrip()[:1] or stop
        run = rf"[^\s{re.escape(after)}]+" if after and after != "<" else r"\S+"
        parts.append(f"({run})" if m.group(1) == secret else run)
        pos = m.end()
    return re.compile("".join(parts)), kind, True


_STOPS = frozenset(",;:|/")


def _literal(text: str, between: bool) -> str:
    """A template's literal text as a pattern: its blanks any run of blanks (one at least between
    two placeholders)."""
    if not text.strip():
        return r"[ \t]+" if between and text else r"[ \t]*"
    return "".join(r"[ \t]*" if c.isspace() else re.escape(c) for c in text)


def _formed(text: str, pos: int, pattern: re.Pattern[str], kind: str, strong: bool) -> Iterator[Span]:
    for _ in range(_ROWS):
        if pos >= len(text):
            return
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        m = None if _COMMENTED.match(text, pos, end) else pattern.match(text, pos, end)
        if m is not None:
            value = m.group(1)
            if not value.startswith("@/") and not spared(value, kind, strong):
                yield kind, m.start(1), m.end(1)
        pos = end + 1
