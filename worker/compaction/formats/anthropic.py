"""Anthropic Messages JSON ({system, messages} or a bare list of messages) as a clean conversation.

Already the canonical shape: content is cleaned block by block (blocks.py) and shaped (roles
merged, tool results paired). A stray `system` role message is folded into the system prompt.
"""

from __future__ import annotations

from worker.compaction.formats.chat import Dialect, load_chat
from worker.compaction.formats.documents import messages_of, parse_document
from worker.compaction.formats.imported import Imported

ANTHROPIC = Dialect("anthropic")


def load(data: bytes) -> Imported:
    """Import an Anthropic Messages request body or message list."""
    system, items = messages_of(parse_document(data, "Anthropic messages"), "Anthropic messages")
    return load_chat(items, system, ANTHROPIC)
