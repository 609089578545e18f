"""The text markers stages leave behind, and how to recognise them again (for idempotence).

Every marker names a virtual file ref the agent can read back with the served `read_file` tool.
Refs are content-addressed, so the same content always gets the same ref.
"""

from __future__ import annotations

import re

from worker.compaction.model import content_hash

_MARKER = re.compile(r"\[compactd: (?:clipped|offloaded|argument clipped|identical to)")
_REF = re.compile(r"ref=(f_[0-9a-f]{16})")


def file_ref(text: str) -> str:
    """Content-addressed ref of a virtual file holding `text`."""
    return "f_" + content_hash(text)[:16]


def archive_ref(text: str) -> str:
    """Content-addressed ref of an archive chunk (evicted turns, verbatim, JSON lines)."""
    return "h_" + content_hash(text)[:16]


# a text block that stands for an item of another wire format (worker/proxy/wire/tags.py): it goes
# back to that format whole or not at all, so no stage cuts it
TAG_OPENERS = ("<compactd-item>", '<compactd-role role="')


def is_tagged(text: str) -> bool:
    return text.startswith(TAG_OPENERS)


def is_marked(text: str) -> bool:
    """True when a stage already rewrote this text (so no stage rewrites it again)."""
    return _MARKER.search(text) is not None


def original_hash(text: str) -> str:
    """Hash of the original content: recovered from a marker's ref, else the hash of the text."""
    m = _REF.search(text) if is_marked(text) else None
    return m.group(1) if m else file_ref(text)


def clipped(tokens_cut: int, ref: str, first_line: int, last_line: int) -> str:
    return (
        f"\n\n[compactd: clipped {tokens_cut:,} tokens here (lines {first_line}-{last_line}). "
        f"Full text: read_file ref={ref} start_line={first_line} end_line={last_line}]\n\n"
    )


def offloaded(total_tokens: int, lines: int, ref: str) -> str:
    return (
        f"\n\n[compactd: offloaded; only the start is shown. The whole text is {total_tokens:,} tokens, "
        f"{lines:,} lines: read_file ref={ref} (line ranges) or grep ref={ref} pattern=...]"
    )


_OFFLOADED_END = re.compile(
    r"read_file ref=(f_[0-9a-f]{16}) \(line ranges\) or grep ref=\1 pattern=\.\.\.\]\Z"
)


def offloaded_ref(text: str) -> str | None:
    """The ref of the virtual file a text that ends with an `offloaded` pointer stands for."""
    found = _OFFLOADED_END.search(text)
    return found.group(1) if found else None


def argument_clipped(chars_cut: int, ref: str) -> str:
    return (
        f"\n[compactd: argument clipped, {chars_cut:,} more characters. The file is on disk (re-read it), "
        f"or read the full value: read_file ref={ref}]"
    )


def identical(tool_name: str, tool_use_id: str, seq: int) -> str:
    return f"[compactd: identical to the output of {tool_name} call {tool_use_id} at seq {seq}, shown later.]"
