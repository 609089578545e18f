"""Blocks: foreign message content (strings, OpenAI/LangChain parts, loose Anthropic blocks) as clean
Anthropic content blocks.

Every function appends a warning naming `where` for anything it could not keep as it was; nothing
is dropped silently except blank text, which the API rejects and which carries nothing.
Thinking blocks are returned as the very same objects (never edited).
"""

from __future__ import annotations

from typing import Any

import orjson

from worker.compaction.formats.documents import object_at
from worker.compaction.model import Block

# Tuples, not sets: membership tests on untrusted JSON values must not hash them (a list would raise).
# Blocks the Messages API accepts in a conversation and that need no conversion.
PASSTHROUGH = ("image", "document", "search_result", "server_tool_use", "web_search_tool_result")
THINKING = ("thinking", "redacted_thinking")
RESULT_PARTS = ("text", "image", "document", "search_result")
TEXT_KEYS = ("type", "text", "citations", "cache_control")


def content_blocks(content: Any, where: str, warnings: list[str]) -> list[Block]:
    """Anthropic blocks of a message's content: a string, a list of blocks/parts, or null."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        warnings.append(f"{where}: content is a {type(content).__name__}, not text or a list; skipped")
        return []
    blocks = []
    for j, item in enumerate(content):
        block = one_block(item, f"{where}.content[{j}]", warnings)
        if block is not None:
            blocks.append(block)
    return blocks


def one_block(item: Any, where: str, warnings: list[str]) -> Block | None:
    """One content item as an Anthropic block, or None (blank text, or skipped with a warning)."""
    if isinstance(item, str):
        warnings.append(f"{where}: a bare string inside a content list; kept as a text block")
        return text_block(item)
    if not isinstance(item, dict):
        warnings.append(f"{where}: a {type(item).__name__} inside a content list; skipped")
        return None
    kind = item.get("type")
    if kind in THINKING:
        return item
    if kind == "text" or kind in ("input_text", "output_text"):
        text = item.get("text")
        if not isinstance(text, str):
            warnings.append(f"{where}: text block without a string 'text'; skipped")
            return None
        return text_block(text, {k: item[k] for k in TEXT_KEYS[2:] if k in item})
    if kind == "tool_use" or kind == "tool_call":
        return tool_use_block(item, where, warnings)
    if kind == "tool_result":
        return tool_result_block(item, where, warnings)
    if kind == "image_url":
        return image_from_url(item, where, warnings)
    if kind in PASSTHROUGH:
        return item
    warnings.append(f"{where}: unsupported block type {kind!r}; kept as text (its JSON)")
    return text_block(orjson.dumps(item).decode())


def text_block(text: str, extra: dict[str, Any] | None = None) -> Block | None:
    """A text block, or None when the text is blank (the API rejects empty text blocks)."""
    return {"type": "text", "text": text, **(extra or {})} if text.strip() else None


def tool_input(value: Any, where: str, warnings: list[str]) -> dict[str, Any]:
    """A tool call's input object from a dict or a JSON string; bad JSON is kept as {"raw": ...}."""
    if isinstance(value, dict):
        return value
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            warnings.append(f"{where}: tool arguments are not valid JSON; kept as {{'raw': ...}}")
            return {"raw": value}
        if isinstance(parsed, dict):
            return parsed
        value = parsed
    warnings.append(
        f"{where}: tool arguments are a {type(value).__name__}, not an object; kept as {{'value': ...}}"
    )
    return {"value": value}


def tool_use_block(item: dict[str, Any], where: str, warnings: list[str]) -> Block | None:
    """A tool_use block from an Anthropic tool_use, a LangChain tool call or an OpenAI tool call.

    Only the API's own fields are kept (Claude Code adds e.g. `caller`); the call's id, name and
    input are kept as they are.
    """
    function = object_at(item, "function")
    name = function.get("name", item.get("name"))
    call_id = item.get("id")
    if not isinstance(name, str) or not name:
        warnings.append(f"{where}: tool call without a name; kept as text (its JSON)")
        return text_block(orjson.dumps(item).decode())
    if not isinstance(call_id, str) or not call_id:
        warnings.append(f"{where}: tool call {name!r} without an id; kept as text (its JSON)")
        return text_block(orjson.dumps(item).decode())
    raw = function["arguments"] if "arguments" in function else item.get("input", item.get("args"))
    block: Block = {
        "type": "tool_use",
        "id": call_id,
        "name": name,
        "input": tool_input(raw, where, warnings),
    }
    if "cache_control" in item:
        block["cache_control"] = item["cache_control"]
    return block


def tool_result_block(item: dict[str, Any], where: str, warnings: list[str]) -> Block | None:
    """A tool_result block with clean content; one without a string tool_use_id becomes text."""
    tool_use_id = item.get("tool_use_id")
    if not isinstance(tool_use_id, str):
        warnings.append(f"{where}: tool_result without a string 'tool_use_id'; kept as text")
        return text_block(result_text(item.get("content")))
    return result(tool_use_id, item.get("content", ""), where, warnings, is_error=item.get("is_error"))


def result(tool_use_id: str, content: Any, where: str, warnings: list[str], *, is_error: Any = None) -> Block:
    """A tool_result block for tool_use_id; is_error is kept only when it is a boolean."""
    block: Block = {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": result_content(content, where, warnings),
    }
    if isinstance(is_error, bool):
        block["is_error"] = is_error
    return block


def result_content(content: Any, where: str, warnings: list[str]) -> str | list[Block]:
    """A tool result's content: a string, or a list of text/image/document parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        warnings.append(f"{where}: tool result content is a {type(content).__name__}; kept as its JSON text")
        return orjson.dumps(content).decode()
    parts = []
    for j, item in enumerate(content):
        block = one_block(item, f"{where}.content[{j}]", warnings)
        if block is None:
            continue
        if block.get("type") not in RESULT_PARTS:
            warnings.append(
                f"{where}.content[{j}]: a {block.get('type')!r} block inside a tool result; kept as text"
            )
            block = {"type": "text", "text": orjson.dumps(block).decode()}
        parts.append(block)
    return parts


def result_text(content: Any) -> str:
    """Plain text of any tool result content (for orphans turned into text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") if isinstance(p, dict) else p for p in content]
        return "\n".join(t for t in texts if isinstance(t, str))
    return "" if content is None else orjson.dumps(content).decode()


def image_from_url(item: dict[str, Any], where: str, warnings: list[str]) -> Block | None:
    """An Anthropic image block from an OpenAI/LangChain image_url part (data: URLs become base64)."""
    spec = item.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not url:
        warnings.append(f"{where}: image_url part without a url; skipped")
        return None
    if url.startswith("data:") and ";base64," in url:
        media_type, _, data = url[5:].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}
