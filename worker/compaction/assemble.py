"""Assemble: a transcript becomes the Anthropic request layout of DESIGN §4.

system -> working memory -> handoff note -> compacted turns -> verbatim tail -> status note.
The stable parts come first so the prefix stays byte-identical between epochs; the status note,
the only volatile part, is added at serving time to the last user message.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from worker.compaction.model import Block, Transcript

CACHE_CONTROL = {"type": "ephemeral"}


def assemble(t: Transcript) -> dict[str, Any]:
    """{"system": [text blocks], "messages": [...]}, with cache_control on the stable prefix."""
    system: list[Block] = []
    if t.system:
        system.append({"type": "text", "text": t.system})
    if t.memory:
        system.append({"type": "text", "text": f"<working_memory>\n{t.memory}\n</working_memory>"})
    if system:
        system[-1] = {**system[-1], "cache_control": CACHE_CONTROL}
    messages = [turn.as_message() for turn in t.turns]
    if t.handoff is not None:
        messages = _insert_handoff(messages, t.handoff.text)
    return {"system": system, "messages": merge_roles(messages)}


def _insert_handoff(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """The note goes right after the first user message (the task), which is always kept."""
    note_message = {"role": "user", "content": [{"type": "text", "text": note}]}
    if not messages:
        return [note_message]
    return [messages[0], note_message, *messages[1:]]


def merge_roles(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge neighbours with the same role (the API would); tool_result blocks stay first."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content = (
            list(m["content"]) if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        )
        if out and out[-1]["role"] == m["role"]:
            merged = out[-1]["content"] + content
            if m["role"] == "user":
                merged = [b for b in merged if b.get("type") == "tool_result"] + [
                    b for b in merged if b.get("type") != "tool_result"
                ]
            out[-1] = {"role": m["role"], "content": merged}
        else:
            out.append({"role": m["role"], "content": content})
    return out


def mark_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put a cache_control breakpoint on the last block of the last message (end of the stable prefix)."""
    if not messages:
        return messages
    last = messages[-1]
    blocks = list(last["content"])
    blocks[-1] = {**blocks[-1], "cache_control": CACHE_CONTROL}
    return [*messages[:-1], {"role": last["role"], "content": blocks}]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A virtual file the agent can read back, and which line ranges it has read so far."""

    ref: str
    kind: str
    lines: int
    read_ranges: tuple[str, ...] = ()


def status_note(tokens_used: int, budget_tokens: int, files: Sequence[FileInfo]) -> str:
    """The small volatile note at the very end of the prompt: budget and virtual files."""
    lines = [f"[compactd status] context: {tokens_used:,} of {budget_tokens:,} tokens used."]
    if files:
        lines.append("Virtual files (read with the read_file / grep tools):")
        for f in files[:20]:
            read = f"; read: {', '.join(f.read_ranges)}" if f.read_ranges else "; not read yet"
            lines.append(f"- {f.ref} ({f.kind}, {f.lines:,} lines{read})")
        if len(files) > 20:
            lines.append(f"- … and {len(files) - 20} more (GET /files lists them all)")
    return "\n".join(lines)


def add_status(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """Append the status note as a text block to the last message if it is from the user."""
    if not messages or messages[-1]["role"] != "user" or not note:
        return messages
    last = messages[-1]
    return [*messages[:-1], {"role": "user", "content": [*last["content"], {"type": "text", "text": note}]}]
