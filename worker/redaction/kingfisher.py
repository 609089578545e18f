"""The second pass: Kingfisher's maintained rule catalog (betterleaks and veles rules, ~490).

Our detectors know the formats we wrote them for; Kingfisher knows hundreds more and is kept up to
date upstream. It scans bytes in memory (Vectorscan, about 1 ms per 200 KB) and returns byte
offsets, rule ids and named captures; nothing here validates a credential or touches the network.

Compiling the catalog takes ~4 s, loading it compiled ~0.5 s: `prewarm(dir)` compiles it once
into the service's own directory (`compactd prewarm` at install, every process at start-up) and
makes it this process's cache, so every later process (API, Celery pool children) only loads it.
A directory it cannot use (not writable, another owner) only costs the compile: the scanner then
compiles in memory. The scanner is built lazily per process; the native library is imported then.

A finding becomes a span of the credential itself: a rule that captures `password` (a URI) or a
token group is narrowed to that capture, so user names and hosts stay readable. A value that is
visibly a reference or a placeholder (`${VAR}`, `<password>`, `xxxx`) is left alone.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from worker.redaction.positions import OPTIONAL_PART

__all__ = ["DEFAULT_CACHE_DIR", "kind_of", "prewarm", "spans", "warm"]

# the service's own directory: inside its environment, beside the installed code
DEFAULT_CACHE_DIR = Path(sys.prefix) / "share" / "compactd" / "kingfisher-rules"
_cache_dir: list[Path | None] = [DEFAULT_CACHE_DIR]  # what _scanner() loads from (None: no cache)
Span = tuple[str, int, int]

# the capture that holds the credential, when a rule captures more than it (URIs, user + password)
_SECRET_CAPTURES = ("password", "git_password", "token", "secret", "key")
# kinds our own detectors already use for the same secrets, so one secret reads the same either way
_KINDS = {
    "generic-api-key": "assignment",
    "generic-credential-uri": "url_password",
    "mongodb-connection-string": "url_password",
    "private-key": "private_key",
    "jwt": "jwt",
}
# shorter than any credential a rule finds with its context (`curl -u a:bc`): not worth a call
_MIN_BYTES = 12
_REFERENCE = re.compile(
    r"^(?:\$\{[^}]*\}|\$\([A-Za-z_][A-Za-z0-9_]*\)|\$(?:[A-Z_][A-Z0-9_]*|[a-z_][A-Za-z_]*)|%[sd]|%\([A-Za-z_]+\)s|\{\{.*\}\}|\{[A-Za-z_]+\}"
    r"|<[A-Za-z_ -]+>|\*+|[xX]{4,})$"
)


def prewarm(cache_dir: Path) -> str:
    """Make cache_dir this process's rule cache and compile the catalog into it if it is empty:
    "present", "stored", or "unusable: <why>" (then scanners compile in memory, ~4 s each)."""
    from kingfisher_sdk import Rules

    try:
        cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        present = any(cache_dir.iterdir())
    except OSError as exc:
        _cache_dir[0] = None
        return f"unusable: {type(exc).__name__}"
    _cache_dir[0] = cache_dir
    if present:
        return "present"  # a stale entry (another wheel or CPU) is recompiled by Kingfisher itself
    return str(Rules(cache_dir=str(cache_dir)).cache_status)


def warm() -> None:
    """Load the scanner now (~0.5 s from the cache) rather than on the first redaction: at start-up,
    before a Celery pool forks (its children share the loaded rules)."""
    _scanner()


def _is_reference(value: str) -> bool:
    """`${TOKEN}`, `<password>`, `xxxx`, `user:{password}` or a usage line's `[:password]]`: a
    value that only names a secret."""
    value = value.strip("\"'")
    tail = value.split(":", 1)[-1]
    return any(_REFERENCE.match(v) for v in (value, tail)) or OPTIONAL_PART.fullmatch(tail) is not None


@cache
def _scanner() -> Any:
    from kingfisher_sdk import Rules, Scanner

    where = _cache_dir[0]
    rules = Rules(cache_dir=str(where)) if where is not None else Rules(cache=False)
    # base64=False: our own base64 view already looks inside encoded runs
    return Scanner(rules, base64=False)


def kind_of(rule_id: str) -> str:
    """The placeholder kind of a rule: `betterleaks.slack-bot-token` -> `slack_bot_token`."""
    name = rule_id.split(".", 1)[-1].removeprefix("secrets/")
    return _KINDS.get(name) or re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _narrowed(data: bytes, start: int, end: int, captures: dict[str, str]) -> tuple[int, int]:
    for name, value in captures.items():
        if name.lower() in _SECRET_CAPTURES and value:
            at = data.find(value.encode("utf-8", "surrogatepass"), start, end)
            if at >= 0:
                return at, at + len(value.encode("utf-8", "surrogatepass"))
    return start, end


def _located(data: bytes, finding: Any) -> tuple[int, int] | None:
    """The finding's byte span in data. Kingfisher reports offsets in the text it decoded, which
    for UTF-16-looking input is not ours: trust them only if they hold its secret, else find it."""
    where = finding.location
    start, end = where["start_offset"], where["end_offset"]
    secret = finding.secret.encode("utf-8", "surrogatepass")
    if data[start:end] == secret:
        return start, end
    at = data.find(secret) if secret else -1
    return (at, at + len(secret)) if at >= 0 else None


def spans(data: bytes, skip: frozenset[str] = frozenset()) -> list[Span]:
    """(kind, start, end) byte spans of every credential a rule not in `skip` finds, left to right."""
    out: list[Span] = []
    if len(data) < _MIN_BYTES:
        return out
    for finding in _scanner().scan(data):
        if not finding.visible or finding.rule_id in skip:
            continue
        located = _located(data, finding)
        if located is None:
            continue
        start, end = _narrowed(data, *located, finding.captures)
        if end > start and not _is_reference(data[start:end].decode("utf-8", "replace")):
            out.append((kind_of(finding.rule_id), start, end))
    return sorted(out, key=lambda s: s[1])
