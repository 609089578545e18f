"""Anthropic Messages JSON ({system, messages} or a bare list of messages) as a clean conversation.

Already the canonical shape: content is cleaned block by block (blocks.py) and shaped (roles
merged, tool results paired). A stray `system` role message is folded into the system prompt.
Messages that are not objects or have another role are skipped with a warning naming the index.
"""

from __future__ import annotations

from worker.compaction.formats.blocks import content_blocks
from worker.compaction.formats.documents import messages_of, parse_document, system_text
from worker.compaction.formats.imported import Imported
from worker.compaction.formats.shaping import Entry, shape


def load(data: bytes) -> Imported:
    """Import an Anthropic Messages request body or message list."""
    system, items = messages_of(parse_document(data, "Anthropic messages"), "Anthropic messages")
    warnings: list[str] = []
    systems = [system_text(system)]
    entries = []
    for i, message in enumerate(items):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            systems.append(system_text(message.get("content")))
        elif role in ("user", "assistant"):
            entries.append(Entry(role, tuple(content_blocks(message.get("content"), where, warnings)), where))
        else:
            warnings.append(f"{where}: not a message with role 'user' or 'assistant'; skipped")
    messages, _ = shape(entries, warnings)
    return Imported(
        "\n\n".join(s for s in systems if s),
        messages,
        "anthropic",
        tuple(warnings),
        {"source_messages": len(items)},
    )
