"""OpenAI chat messages (list, or {messages}) as an Anthropic conversation.

- `system` / `developer` messages form the system prompt;
- `assistant.tool_calls[]` become tool_use blocks (arguments is a JSON string; bad JSON is kept as
  {"raw": "..."} with a warning); `refusal` is kept as text;
- `tool` messages (by `tool_call_id`) become tool_result blocks;
- the legacy `function_call` / `function` pair is matched by function name (id
  "function_call_<name>"; shaping renames repeats, with a warning);
- content parts: text, image_url (data: URLs become base64 images).
"""

from __future__ import annotations

from typing import Any

from worker.compaction.formats.blocks import content_blocks, result, text_block, tool_use_block
from worker.compaction.formats.chat import Dialect, load_chat
from worker.compaction.formats.documents import messages_of, parse_document
from worker.compaction.formats.imported import Imported
from worker.compaction.model import Block

ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}


def load(data: bytes) -> Imported:
    """Import an OpenAI chat-completions message list."""
    system, items = messages_of(parse_document(data, "OpenAI messages"), "OpenAI messages")
    return load_chat(items, system, OPENAI)


def role_of(item: Any) -> tuple[str | None, dict[str, Any]]:
    """The canonical role of an OpenAI message (tool and function messages are "tool")."""
    role = item.get("role") if isinstance(item, dict) else None
    return (
        (ROLES.get(role), item) if isinstance(role, str) else (None, item if isinstance(item, dict) else {})
    )


def assistant_blocks(message: dict[str, Any], where: str, warnings: list[str]) -> tuple[Block, ...]:
    """Text, refusal and tool calls of an OpenAI-style assistant message, in that order."""
    blocks = content_blocks(message.get("content"), where, warnings)
    refusal = message.get("refusal")
    if isinstance(refusal, str) and (block := text_block(refusal)):
        blocks.append(block)
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        warnings.append(f"{where}.tool_calls: not a list; skipped")
        calls = []
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        calls = [*calls, {"id": f"function_call_{legacy.get('name')}", "function": legacy}]
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            warnings.append(f"{where}.tool_calls[{j}]: not an object; skipped")
        elif (block := tool_use_block(call, f"{where}.tool_calls[{j}]", warnings)) is not None:
            blocks.append(block)
    return tuple(blocks)


def tool_results(message: dict[str, Any], where: str, warnings: list[str]) -> tuple[Block, ...]:
    """The tool_result a tool (or legacy function) message carries; without an id, its text."""
    call_id = message.get("tool_call_id")
    if message.get("role") == "function" and isinstance(message.get("name"), str):
        call_id = f"function_call_{message['name']}"
    if isinstance(call_id, str) and call_id:
        return (result(call_id, message.get("content"), where, warnings),)
    warnings.append(f"{where}: tool message without a tool_call_id; kept as text")
    return tuple(content_blocks(message.get("content"), where, warnings))


OPENAI = Dialect("openai", role=role_of, assistant=assistant_blocks, tool=tool_results)
