"""Sections whose every entry is a credential, whatever the entries are called.

    composer auth.json   "github-oauth": { "github.com": "<token>" }   "gitlab-token": { … }
    NuGet.Config         <apikeys> <add key="https://www.nuget.org/api/v2/package" value="<key>" /> </apikeys>
    Kubernetes Secret    stringData:  (its entries, any names)
    JAAS login module    …PlainLoginModule required username="admin" password="…" user_alice="…";
                         (Kafka's SASL/PLAIN and SCRAM users: every `user_NAME` option is NAME's password)
    Shiro INI [users]    admin = <password>, admin        (a user, the password, then the user's roles)

The entries' names are hosts or arbitrary; the section's name says what they hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from worker.redaction.configs.names import spared
from worker.redaction.lines import lines_from

Span = tuple[str, int, int]

_JSON_SECTION = re.compile(
    r"\"(?:github-oauth|gitlab-oauth|gitlab-token|bitbucket-oauth|bearer|apikeys|tokens|secrets|passwords)\"\s*:\s*\{([^{}]*)\}"
)
_STRING_ENTRY = re.compile(r"\"[^\"\n]+\"\s*:\s*\"([^\"\n]*)\"")
_XML_SECTION = re.compile(r"(?is)<(apikeys|secrets|passwords|tokens)>(.*?)</\1>")
_VALUE_ATTR = re.compile(r"\bvalue\s*=\s*\"([^\"]*)\"")
_KIND_SECRET = re.compile(r"(?m)^[ \t]*kind:[ \t]*[\"']?Secret[\"']?[ \t]*$")
_STRING_DATA = re.compile(r"(?m)^([ \t]*)stringData:[ \t]*$")
# a JAAS login module's `user_NAME="password"` options (Kafka, ZooKeeper): the users it accepts
_JAAS_USER = re.compile(r"(?:^|[\s;])user_[\w.-]+\s*=\s*\"([^\"\n]*)\"")
_YAML_ENTRY = re.compile(
    r"[ \t]+[\"']?([\w.-]+)[\"']?:[ \t]+(?:\"([^\"\n]*)\"|'([^'\n]*)'|([^\s#|>][^\n]*?))[ \t]*(?:#[^\n]*)?$"
)
# a Secret's entries that name or configure, not unlock (Argo CD's and Tekton's repository
# Secrets: `url`, `username`, `insecure: "true"`); the standard profile keeps identifiers
_NOT_SECRET_ENTRY = frozenset(["url", "username", "user", "name", "project", "type", "namespace"])
_FLAG_VALUE = frozenset(["true", "false", "yes", "no", "on", "off"])
# an INI `[users]` section (Apache Shiro, Zeppelin): `name = password, role[, role…]`; a key of
# several snake_case words is a setting (Grafana's `[users]` has `hidden_users = a, b`), and an
# entry without roles is no user's
_USERS_SECTION = re.compile(r"(?m)^[ \t]*\[users\][ \t]*\r?$((?:\n(?![ \t]*\[)[^\n]*)*)")
_USER_ROLES = re.compile(r"(?m)^[ \t]*([A-Za-z][\w.@-]*)[ \t]*=[ \t]*([^,\s][^,\n]*?)[ \t]*,[ \t]*[\w*:-]+")
_SETTING = re.compile(r"[a-z]+(?:_[a-z]+)+")


def section_spans(text: str) -> Iterator[Span]:
    """The values of every entry of a credential section."""
    if "{" in text:
        for m in _JSON_SECTION.finditer(text):
            for e in _STRING_ENTRY.finditer(m.group(1)):
                if not spared(e.group(1), "token", True):
                    yield "token", m.start(1) + e.start(1), m.start(1) + e.end(1)
    if "</" in text:
        for m in _XML_SECTION.finditer(text):
            for e in _VALUE_ATTR.finditer(m.group(2)):
                if not spared(e.group(1), "api_key", True):
                    yield "api_key", m.start(2) + e.start(1), m.start(2) + e.end(1)
    if "stringData:" in text and _KIND_SECRET.search(text):
        yield from _string_data(text)
    if "[users]" in text:
        for m in _USERS_SECTION.finditer(text):
            for e in _USER_ROLES.finditer(m.group(1)):
                if not _SETTING.fullmatch(e.group(1)) and not spared(e.group(2), "password", True):
                    yield "password", m.start(1) + e.start(2), m.start(1) + e.end(2)
    if "LoginModule" in text:
        for m in _JAAS_USER.finditer(text):
            if not spared(m.group(1), "password", True):
                yield "password", m.start(1), m.end(1)


def _string_data(text: str) -> Iterator[Span]:
    """The entries under a Kubernetes Secret's `stringData:` (plain-text secrets)."""
    for section in _STRING_DATA.finditer(text):
        indent = len(section.group(1))
        for pos, _, line in lines_from(text, section.end() + 1, len(text)):  # to the section's end
            depth = len(line) - len(line.lstrip())
            if line.strip() and depth <= indent:
                break
            m = _YAML_ENTRY.fullmatch(line)
            if m is not None and m.group(1).lower() not in _NOT_SECRET_ENTRY:
                group = next(g for g in (2, 3, 4) if m.group(g) is not None)
                value = m.group(group)
                if value.lower() not in _FLAG_VALUE and not spared(value, "secret", True):
                    yield "secret", pos + m.start(group), pos + m.end(group)
