"""LangChain message dicts as an Anthropic conversation.

Accepted shapes, mixed freely in one list (or under {"messages": [...]}):
- `{"type": "human"|"ai"|"tool"|"system", "content", "tool_calls", "tool_call_id", ...}`
  (`message.model_dump()`), and the same with `"role"` (human/ai/user/assistant/system/tool);
- `{"type": "human", "data": {...}}` (`messages_to_dict`);
- `{"lc": 1, "type": "constructor", "id": [..., "HumanMessage"], "kwargs": {...}}` (`dumpd`).
AI `tool_calls` (`{name, args, id}`) become tool_use blocks unless the content already holds a
tool_use with that id (ChatAnthropic puts both); `invalid_tool_calls` keep their raw arguments as
{"raw": ...} with a warning; tool messages become tool_result blocks (`status: "error"` → is_error).
"""

from __future__ import annotations

from typing import Any

from worker.compaction.formats.blocks import content_blocks, result, tool_use_block
from worker.compaction.formats.chat import Dialect, load_chat
from worker.compaction.formats.documents import messages_of, object_at, parse_document
from worker.compaction.formats.imported import Imported
from worker.compaction.model import Block

ROLES = {
    "human": "user",
    "user": "user",
    "HumanMessage": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "AIMessage": "assistant",
    "AIMessageChunk": "assistant",
    "tool": "tool",
    "ToolMessage": "tool",
    "function": "tool",
    "system": "system",
    "SystemMessage": "system",
    "developer": "system",
}


def load(data: bytes) -> Imported:
    """Import a list of LangChain messages."""
    system, items = messages_of(parse_document(data, "LangChain messages"), "LangChain messages")
    return load_chat(items, system, LANGCHAIN)


def role_of(item: Any) -> tuple[str | None, dict[str, Any]]:
    """The canonical role and fields of a LangChain message in any accepted shape."""
    kind, fields = unwrap(item)
    return ROLES.get(kind or ""), fields


def unwrap(item: Any) -> tuple[str | None, dict[str, Any]]:
    """(message type or role, its fields) of any of the accepted shapes; (None, {}) otherwise."""
    if not isinstance(item, dict):
        return None, {}
    if item.get("lc") is not None and isinstance(item.get("kwargs"), dict):
        ids = item.get("id")
        return (ids[-1] if isinstance(ids, list) and ids else None), item["kwargs"]
    if isinstance(item.get("data"), dict) and "content" not in item:
        return item.get("type"), item["data"]
    kind = item.get("type") if isinstance(item.get("type"), str) else item.get("role")
    if kind == "chat":
        kind = item.get("role")
    return (kind if isinstance(kind, str) else None), item


def _ai_blocks(fields: dict[str, Any], where: str, warnings: list[str]) -> tuple[Block, ...]:
    blocks = content_blocks(fields.get("content"), where, warnings)
    have = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    extra = object_at(fields, "additional_kwargs")
    calls = fields.get("tool_calls") or extra.get("tool_calls") or []
    for j, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, dict):
            warnings.append(f"{where}.tool_calls[{j}]: not an object; skipped")
        elif isinstance(call.get("id"), str) and call["id"] in have:
            continue  # ChatAnthropic: the same call is already a tool_use block in the content
        elif (block := tool_use_block(call, f"{where}.tool_calls[{j}]", warnings)) is not None:
            blocks.append(block)
            have.add(call.get("id"))
    invalid = fields.get("invalid_tool_calls")
    for j, call in enumerate(invalid if isinstance(invalid, list) else []):
        if isinstance(call, dict) and not (isinstance(call.get("id"), str) and call["id"] in have):
            raw = call.get("args")
            bad = {**call, "args": {"raw": raw} if isinstance(raw, str) else raw}
            warnings.append(
                f"{where}.invalid_tool_calls[{j}]: arguments did not parse; kept as {{'raw': ...}}"
            )
            if (block := tool_use_block(bad, f"{where}.invalid_tool_calls[{j}]", warnings)) is not None:
                blocks.append(block)
    return tuple(blocks)


def _tool_blocks(fields: dict[str, Any], where: str, warnings: list[str]) -> tuple[Block, ...]:
    call_id = fields.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        warnings.append(f"{where}: tool message without a tool_call_id; kept as text")
        return tuple(content_blocks(fields.get("content"), where, warnings))
    is_error = True if fields.get("status") == "error" else None
    return (result(call_id, fields.get("content"), where, warnings, is_error=is_error),)


LANGCHAIN = Dialect("langchain", role=role_of, assistant=_ai_blocks, tool=_tool_blocks)
