"""Credentials in XML (and HTML-like) configuration: elements, name/value entries, CDATA.

    <password>s3cret</password>   <Pass encoding="base64">c2VjcmV0</Pass>   <db:password><![CDATA[x]]></db:password>
    <property name="hibernate.connection.password">x</property>   <entry key="token">x</entry>
    <property name="password" value="x"/>   <param name="apiKey" value="x"/>   <setting name="Password"><value>x</value>

Attributes (`<user password="x"/>`) are pairs (pairs.py). The text is scanned with patterns, not
parsed: a tool result holds a piece of a file, numbered lines, or several files, and never
resolves entities (so no entity expansion either). Whatever the element holds is its value,
base64 or otherwise encoded: its position says it is a credential.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from worker.redaction.configs.names import credential_kind, spared

Span = tuple[str, int, int]

_ELEMENT = re.compile(
    r"<(?:[\w.-]+:)?([A-Za-z_][\w.-]*)(?:\s[^<>]*)?>(?:<!\[CDATA\[(.*?)\]\]>|([^<]*))</(?:[\w.-]+:)?\1\s*>",
    re.S,
)
_NAMED = re.compile(
    r"\b(?:name|key|id)\s*=\s*[\"']([^\"'<>]{1,100})[\"']"
    r"(?:[^<>]*?\bvalue\s*=\s*(?:\"([^\"]*)\"|'([^']*)')|[^<>/]*>\s*(?:<value>)?(?:<!\[CDATA\[(.*?)\]\]>|([^<]*))<)",
    re.S,
)


def element_spans(
    text: str, kind_of: Callable[[str], tuple[str, bool] | None] = credential_kind
) -> Iterator[Span]:
    """The text of credential elements and of name/value entries naming a credential (by
    `kind_of`: the config positions' names, or the generic layer's wider ones)."""
    if "</" in text:
        for m in _ELEMENT.finditer(text):
            named = kind_of(m.group(1))
            group = 2 if m.group(2) is not None else 3
            if named is not None and not spared(m.group(group), *named):
                yield _trimmed(text, named[0], m.start(group), m.end(group))
    for m in _NAMED.finditer(text):
        named = kind_of(m.group(1))
        if named is None:
            continue
        group = next(g for g in (2, 3, 4, 5) if m.group(g) is not None)
        if not spared(m.group(group), *named):
            yield _trimmed(text, named[0], m.start(group), m.end(group))


def _trimmed(text: str, kind: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return kind, start, end
