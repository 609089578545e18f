"""Chat: importing role-tagged message lists (Anthropic, OpenAI, LangChain, SWE-agent history).

One loop for all of them; a Dialect says how a format names roles, builds assistant blocks and
turns tool messages into results. System messages form the system prompt (joined by blank
lines); items that are not messages of a known role are skipped with a warning naming the index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.compaction.formats.blocks import content_blocks
from worker.compaction.formats.documents import system_text
from worker.compaction.formats.imported import Imported
from worker.compaction.formats.shaping import Entry, shape
from worker.compaction.model import Block

Builder = Callable[[dict[str, Any], str, list[str]], tuple[Block, ...]]


def _plain_role(item: Any) -> tuple[str | None, dict[str, Any]]:
    return (item.get("role"), item) if isinstance(item, dict) else (None, {})


def _content(message: dict[str, Any], where: str, warnings: list[str]) -> tuple[Block, ...]:
    return tuple(content_blocks(message.get("content"), where, warnings))


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one format spells a chat message.

    role: (canonical role — "system", "user", "assistant" or "tool" — and the message's fields);
    assistant / tool: the blocks of an assistant message / of a tool message (tool_results).
    """

    format: str
    label: str = "messages"
    role: Callable[[Any], tuple[str | None, dict[str, Any]]] = _plain_role
    assistant: Builder = _content
    tool: Builder | None = None


def load_chat(
    items: list[Any], system: Any, dialect: Dialect, meta: dict[str, Any] | None = None
) -> Imported:
    """Import a chat message list in the given dialect."""
    warnings: list[str] = []
    systems = [system_text(system)]
    entries = []
    for i, item in enumerate(items):
        where = f"{dialect.label}[{i}]"
        role, fields = dialect.role(item)
        if role == "system":
            systems.append(system_text(fields.get("content")))
        elif role == "user":
            entries.append(Entry("user", _content(fields, where, warnings), where))
        elif role == "assistant":
            entries.append(Entry("assistant", dialect.assistant(fields, where, warnings), where))
        elif role == "tool" and dialect.tool is not None:
            entries.append(Entry("user", dialect.tool(fields, where, warnings), where))
        else:
            warnings.append(f"{where}: not a {dialect.format} message of a known role ({role!r}); skipped")
    messages, _ = shape(entries, warnings)
    meta = {"source_messages": len(items), **(meta or {})}
    return Imported("\n\n".join(s for s in systems if s), messages, dialect.format, tuple(warnings), meta)
