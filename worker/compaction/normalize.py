"""Normalize incoming Anthropic messages into canonical blocks, or say exactly what is wrong."""

from __future__ import annotations

from typing import Any

from worker.compaction.errors import InvalidTranscript
from worker.compaction.model import Block

KNOWN_BLOCKS = {
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "search_result",
}


def normalize_message(message: Any, where: str = "message") -> tuple[str, tuple[Block, ...]]:
    """(role, blocks) of one message; string content becomes one text block. Raises InvalidTranscript."""
    if not isinstance(message, dict):
        raise InvalidTranscript(f"{where} must be an object with 'role' and 'content'")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise InvalidTranscript(f"{where}.role must be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        return role, ({"type": "text", "text": content},)
    if not isinstance(content, list):
        raise InvalidTranscript(f"{where}.content must be a string or a list of content blocks")
    blocks = tuple(_normalize_block(b, f"{where}.content[{i}]") for i, b in enumerate(content))
    return role, blocks


def _normalize_block(block: Any, where: str) -> Block:
    if isinstance(block, str):
        return {"type": "text", "text": block}
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidTranscript(f"{where} must be an object with a 'type'")
    kind = block["type"]
    if kind not in KNOWN_BLOCKS:
        raise InvalidTranscript(f"{where}.type {kind!r} is not a known content block type")
    if kind == "text" and not isinstance(block.get("text"), str):
        raise InvalidTranscript(f"{where}.text must be a string")
    if kind == "tool_use":
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise InvalidTranscript(f"{where} (tool_use) needs string 'id' and 'name'")
        if not isinstance(block.get("input", {}), dict):
            raise InvalidTranscript(f"{where}.input must be an object")
        return {**block, "input": block.get("input", {})}
    if kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            raise InvalidTranscript(f"{where} (tool_result) needs a string 'tool_use_id'")
        content = block.get("content", "")
        if not isinstance(content, str | list):
            raise InvalidTranscript(f"{where}.content must be a string or a list of blocks")
        if isinstance(content, list):
            parts = [_normalize_block(p, f"{where}.content[{i}]") for i, p in enumerate(content)]
            return {**block, "content": parts}
    return dict(block)
