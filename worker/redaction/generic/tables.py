"""Where the text itself says where the credential is: a table's header, a format's template.

A column that a table's header names: each row's value under a credential column.

    # client    server      secret                  IP addresses        (pppd's chap-secrets)
    branch-gw   pppoe-gw    "Wicker7-Sable-Lane"    10.44.0.18
    "laptop"    *           q3Vx8TmL2pRz            *

No word names a credential on the rows, only in the header above them. A header is a line of 3
to 8 words of letters only, a comment's (`#`) or all upper case, none of them prose, exactly one
naming a credential (generic/names.py). Its rows are the lines right below it (comments skipped),
two at least, up to a blank line or a line that is no row: a row has three fields or more, at
least one fewer than the header has words (`IP addresses` is one column), no word of prose, and
no field that makes it a pair (`=`, `name:`). A field is a quoted string or a run without blanks.
An unquoted value must also look random: the header says little about what each row holds
(cert-manager's `SECRET` column holds a Secret's name).

A format a comment spells out with placeholders, then the lines of that form below it:

    #  <username>: <password>[,<rolename> ...]                   (a Jetty realm)
    admin:Rund3ck-Ops-Harbor,user,admin
    #   user_<account>_<user> = <key> [group] [group] [...]     (Swift's tempauth)
    user_test_tester = t2-Hq7VwN3xRb0s .admin

A template has two placeholders or more, exactly one naming a credential (none named `value`:
`<key> = <value>` is a pair's layout, not a credential's), and some text of its own between them
(`<user> <token>` is a form any two words have); what follows `[` is optional and read
only for the punctuation that ends the value. The lines below it that have its form whole (comments
and blank lines skipped) give their value at the credential's place, up to the first line that
has not: code after a `# <user> <token>` comment is none. The credential's name judges it as in a
key (`<password>` any value, `<key>` a random one).

Values are judged as everywhere (configs/names.py `spared`); `@/path` (pppd's "the secret is in
this file") is a reference. Rows and forms end at the next header or template, so each line is read
once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import re2

from worker.redaction.configs.names import spared
from worker.redaction.generic.commands import unquoted
from worker.redaction.generic.names import credential_name
from worker.redaction.lines import lines_from

Span = tuple[str, int, int]

_WORDS = rb"(?:secrets?|passwords?|passwd|pass|passphrase|tokens?|psk|pwd|keys?)"
# a line that may be a table's header: words of letters, one of them a credential's
HEAD = re2.compile(
    rb"(?im)^[ \t]*(?:#[ \t]*)?(?:[a-z]+[ \t]+){0,7}" + _WORDS + rb"(?:[ \t]+[a-z]+){0,7}[ \t]*\r?$"
)
# a comment that spells out a format: two placeholders, one of them a credential's
_CREDENTIAL_PLACEHOLDER = rb"<(?i:[\w-]*(?:pass|pwd|secret|token|key|psk|cred|auth)[\w-]*)>"
TEMPLATE = re2.compile(
    rb"(?m)^[ \t]*(?:#|;|//|--|!)(?:[^\n<]*<[A-Za-z][\w-]*>[^\n]*"
    + _CREDENTIAL_PLACEHOLDER
    + rb"|[^\n<]*"
    + _CREDENTIAL_PLACEHOLDER
    + rb"[^\n]*<[A-Za-z][\w-]*>)"
)
_HEAD = re.compile(HEAD.pattern.decode())
_FIELD = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|\S+")
_ROWS = 64
# words of prose: a sentence about secrets is no header, and no row of a table
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
        "that",
        "using",
        "each",
        "per",
        "by",
        "as",
        "be",
    ]
)
# a comment's marker and the blanks after it
_COMMENTED = re.compile(r"[ \t]*(?:#|;|//|--|!)[ \t]*")


def table_spans(text: str, heads: list[int]) -> Iterator[Span]:
    """The credentials under the credential column of each header that starts at an offset of heads."""
    done = 0
    for at in heads:
        end = text.find("\n", at)
        if at < done or end < 0:
            continue
        column = _column(text[at:end])
        if column is not None:
            index, width, kind, strong = column
            rows = list(_rows(text, end + 1, width))
            done = rows[-1][0] if rows else end
            if len(rows) >= 2:
                yield from _values(rows, index, kind, strong)


def _column(line: str) -> tuple[int, int, str, bool] | None:
    """(index of the credential's column, words in the header, kind, strong) of a header line."""
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
    return i, len(words), kind, strong


def _rows(text: str, pos: int, width: int) -> Iterator[tuple[int, list[tuple[str, int]]]]:
    """(end, [(field, start)]) of each row below a header of `width` words, up to the first line
    that is none (or is another header or template)."""
    for start, end, line in lines_from(text, pos, _ROWS):
        if _COMMENTED.match(line):
            if (_HEAD.match(line) and _column(line)) or (_TEMPLATE.match(line) and _form(line)):
                return  # another table's header, a template: its own reader reads on
        else:
            fields = [(f.group(), start + f.start()) for f in _FIELD.finditer(line)]
            if not _is_row([f for f, _ in fields], width) or (_HEAD.match(line) and _column(line)):
                return
            yield end, fields


def _is_row(fields: list[str], width: int) -> bool:
    if len(fields) < max(3, width - 1):
        return False
    return not any(f.lower() in _PROSE or f in ("=", ":", "=>", ":=") or f.endswith(":") for f in fields)


def _values(
    rows: list[tuple[int, list[tuple[str, int]]]], column: int, kind: str, strong: bool
) -> Iterator[Span]:
    for _, fields in rows:
        if column < len(fields):
            field, start = fields[column]
            # the header says little about each row: an unquoted value must look random
            yield from _judged(field, start, kind, strong and _quoted(field))


def _judged(field: str, start: int, kind: str, strong: bool) -> Iterator[Span]:
    """A field's value, its quotes off, if it is no stand-in (weak: it must also look random)."""
    lo, hi = unquoted(field, 0, len(field))
    value, start = field[lo:hi], start + lo
    if value and not value.startswith("@/") and not spared(value, kind, strong):
        yield kind, start, start + len(value)


_PLACEHOLDER = re.compile(r"<([A-Za-z][\w-]*)>")
_TEMPLATE = re.compile(TEMPLATE.pattern.decode())
_STOPS = frozenset(",;:|/")
# a value in a line of a template's form: a quoted string, or a run up to the template's next character
_QUOTED = r"\"[^\"\n]*\"|'[^'\n]*'|"


def template_spans(text: str, starts: list[int]) -> Iterator[Span]:
    """The credentials of the lines below each template that starts at an offset of starts
    (templates one after another are read together: Swift's `user_…` and `user64_…` forms)."""
    done = 0
    for at in starts:
        end = text.find("\n", at)
        if at < done or end < 0:
            continue
        form = _form(text[at:end])
        if form is not None:
            done = end
            for line_end, span in _formed(text, end + 1, [form]):
                done = line_end
                if span is not None:
                    yield span


Form = tuple[re.Pattern[str], str, bool]  # a whole line of a template's form, kind, strong


def _form(line: str) -> Form | None:
    """(pattern of a whole line of the form, kind, strong) of a template comment."""
    body = line[_COMMENTED.match(line).end() :]  # type: ignore[union-attr]  # TEMPLATE matched it
    head, bracket, optional = body.partition("[")
    names = _PLACEHOLDER.findall(head)
    if len(_PLACEHOLDER.findall(body)) < 2 or any(n.lower() in ("value", "val", "values") for n in names):
        return None
    named = [(n, k) for n in names if (k := credential_name(n)) is not None]
    if len(named) != 1:
        return None
    if not _PLACEHOLDER.sub("", head).strip():
        return None  # `<user> <token>`: blanks alone between placeholders; any two words fit that
    secret, (kind, strong) = named[0]
    stop = optional[:1] if bracket and optional[:1] in _STOPS else ""
    parts, pos = [r"[ \t]*"], 0
    for m in _PLACEHOLDER.finditer(head):
        parts.append(_literal(head[pos : m.start()], between=pos > 0))
        after = head[m.end() :].lstrip()[:1] or stop
        run = rf"[^\s{re.escape(after)}]+" if after and after != "<" else r"\S+"
        parts.append(f"({_QUOTED}{run})" if m.group(1) == secret else run)
        pos = m.end()
    tail = _literal(head[pos:].rstrip(), between=False)
    rest = rf"(?:{re.escape(stop)}.*|[ \t].*)?" if bracket else r"[ \t]*"
    return re.compile("".join(parts) + tail + rest + r"\r?$"), kind, strong


def _literal(text: str, between: bool) -> str:
    """A template's literal text as a pattern: its blanks any run of blanks (one at least between
    two placeholders)."""
    if not text.strip():
        return r"[ \t]+" if between and text else r"[ \t]*"
    return "".join(r"[ \t]*" if c.isspace() else re.escape(c) for c in text)


def _formed(text: str, pos: int, forms: list[Form]) -> Iterator[tuple[int, Span | None]]:
    """(end of the line, its credential or None) of each line below templates that has one of
    their forms, up to the first other line that is not a comment, or a header; a template
    among the comments adds its form."""
    for start, end, line in lines_from(text, pos, _ROWS):
        if _COMMENTED.match(line) or not line.strip():
            form = _form(line) if _TEMPLATE.match(line) else None
            if form is not None:
                forms.append(form)
            elif _HEAD.match(line) and _column(line) is not None:
                return
            yield end, None
            continue
        for pattern, kind, strong in forms:
            m = pattern.fullmatch(text, start, end)
            if m is not None:
                yield end, next(_judged(m.group(1), m.start(1), kind, strong), None)
                break
        else:
            return  # a line of no template's form: the lines they describe have ended


def _quoted(field: str) -> bool:
    return unquoted(field, 0, len(field))[0] == 1
