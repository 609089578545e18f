"""Documents: raw bytes to JSON values, with errors that say where (line numbers for JSON Lines)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from worker.compaction.errors import InvalidTranscript

BOM = b"\xef\xbb\xbf"


def parse_document(data: bytes, what: str) -> Any:
    """The one JSON value in data; raises InvalidTranscript naming the format when it is not JSON."""
    try:
        return orjson.loads(data.removeprefix(BOM))
    except orjson.JSONDecodeError as exc:
        raise InvalidTranscript(f"{what}: the file is not valid JSON ({exc})") from None


def parse_lines(data: bytes) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, error) for every non-blank line; value is None when error says why."""
    return _parsed(data.removeprefix(BOM).splitlines())


def read_lines(data: bytes) -> Iterator[tuple[int, Any, str | None]]:
    """parse_lines, splitting the data only as far as it is read (a reader that stops at the first
    lines does not split the rest)."""
    return _parsed(lines_of(data.removeprefix(BOM)))


def lines_of(data: bytes) -> Iterator[bytes]:
    """The lines of data.splitlines() one at a time: ended by `\n`, `\r\n` or `\r`. Linear: the
    next `\n` is looked for again only once a line has passed it (a file of `\r` endings alone
    would otherwise be searched to its end for every line)."""
    pos, size = 0, len(data)
    end = -1  # the next `\n` at or after pos, or size when there is none
    while pos < size:
        if end < pos:
            newline = data.find(b"\n", pos)
            end = size if newline < 0 else newline
        ret = data.find(b"\r", pos, end)
        if ret >= 0:
            yield data[pos:ret]
            pos = ret + 2 if data[ret + 1 : ret + 2] == b"\n" else ret + 1
        else:
            yield data[pos:end]
            pos = end + 1


def _parsed(lines: Iterable[bytes]) -> Iterator[tuple[int, Any, str | None]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, orjson.loads(line), None
        except orjson.JSONDecodeError as exc:
            yield number, None, f"not valid JSON ({exc})"


def messages_of(doc: Any, what: str) -> tuple[Any, list[Any]]:
    """(top-level system value, message list) of a bare list or a {system?, messages} object."""
    if isinstance(doc, list):
        return None, doc
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return doc.get("system"), doc["messages"]
    raise InvalidTranscript(f"{what}: expected a list of messages or an object with a 'messages' list")


def system_text(value: Any) -> str:
    """A system prompt as text: a string, or the text of a list of text blocks (joined by blank lines)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p if isinstance(p, str) else p.get("text") for p in value if isinstance(p, str | dict)]
        return "\n\n".join(p for p in parts if isinstance(p, str) and p)
    return ""


def object_at(value: dict[str, Any], key: str) -> dict[str, Any]:
    """value[key] when it is an object, else {} (for reading optional nested fields safely)."""
    found = value.get(key)
    return found if isinstance(found, dict) else {}


def text_at(value: dict[str, Any], key: str) -> str:
    """value[key] when it is a string, else ""."""
    found = value.get(key)
    return found if isinstance(found, str) else ""
