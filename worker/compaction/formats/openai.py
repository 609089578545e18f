"""OpenAI chat messages (list, or {messages}) as an Anthropic conversation.

- `system` / `developer` messages form the system prompt (joined by blank lines);
- `assistant.tool_calls[]` become tool_use blocks (arguments is a JSON string; bad JSON is kept as
  {"raw": "..."} with a warning); the legacy `function_call` becomes a tool_use too;
- `tool` messages (by `tool_call_id`) and legacy `function` messages become tool_result blocks;
- content parts: text, image_url (data: URLs become base64 images); `refusal` is kept as text.
"""

from __future__ import annotations

from typing import Any

from worker.compaction.formats.blocks import content_blocks, result, text_block, tool_use_block
from worker.compaction.formats.documents import messages_of, parse_document, system_text
from worker.compaction.formats.imported import Imported
from worker.compaction.formats.shaping import Entry, shape
from worker.compaction.model import Block

SYSTEM_ROLES = ("system", "developer")


def load(data: bytes) -> Imported:
    """Import an OpenAI chat-completions message list."""
    system, items = messages_of(parse_document(data, "OpenAI messages"), "OpenAI messages")
    warnings: list[str] = []
    systems = [system_text(system)]
    entries = []
    last_function_call = ""
    for i, message in enumerate(items):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in SYSTEM_ROLES:
            systems.append(system_text(message.get("content")))
        elif role == "user":
            entries.append(
                Entry("user", tuple(content_blocks(message.get("content"), where, warnings)), where)
            )
        elif role == "assistant":
            if isinstance(message.get("function_call"), dict):
                last_function_call = f"function_call_{i}"
            blocks = assistant_blocks(message, where, warnings, legacy_id=f"function_call_{i}")
            entries.append(Entry("assistant", tuple(blocks), where))
        elif role in ("tool", "function"):
            call_id = message.get("tool_call_id") if role == "tool" else last_function_call
            entries.append(
                Entry("user", tool_results(call_id, message.get("content"), where, warnings), where)
            )
        else:
            warnings.append(f"{where}: not a chat message with a known role; skipped")
    messages, _ = shape(entries, warnings)
    return Imported(
        "\n\n".join(s for s in systems if s),
        messages,
        "openai",
        tuple(warnings),
        {"source_messages": len(items)},
    )


def assistant_blocks(
    message: dict[str, Any], where: str, warnings: list[str], *, legacy_id: str = "function_call"
) -> list[Block]:
    """Text, refusal and tool calls of an OpenAI-style assistant message, in that order.

    A legacy `function_call` gets the id legacy_id (the matching `function` message answers it).
    """
    blocks = content_blocks(message.get("content"), where, warnings)
    refusal = message.get("refusal")
    if isinstance(refusal, str) and (block := text_block(refusal)):
        blocks.append(block)
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        warnings.append(f"{where}.tool_calls: not a list; skipped")
        calls = []
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            warnings.append(f"{where}.tool_calls[{j}]: not an object; skipped")
        elif (block := tool_use_block(call, f"{where}.tool_calls[{j}]", warnings)) is not None:
            blocks.append(block)
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        call = {"id": legacy_id, "function": legacy}
        if (block := tool_use_block(call, f"{where}.function_call", warnings)) is not None:
            blocks.append(block)
    return blocks


def tool_results(call_id: Any, content: Any, where: str, warnings: list[str]) -> tuple[Block, ...]:
    """The tool_result a tool message carries; without a call id its text is kept as text."""
    if isinstance(call_id, str) and call_id:
        return (result(call_id, content, where, warnings),)
    warnings.append(f"{where}: tool message without a tool_call_id; kept as text")
    return tuple(content_blocks(content, where, warnings))
