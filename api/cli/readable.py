"""A session as a person reads it: one block per turn, roles and tool calls spelled out (`export --format text`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

RESULT_LINES = 40  # a tool result longer than this shows its first lines and says how many were left out


def render_turns(system: str | list[Any] | None, messages: Iterable[dict[str, Any]]) -> Iterable[str]:
    """Text blocks, one for the system prompt and one per message, each headed `#seq role`."""
    if system:
        yield "=== system ===\n" + _text_of(system)
    for seq, message in enumerate(messages, start=1):
        body = "\n".join(_block_lines(message.get("content")))
        yield f"=== #{seq} {message.get('role', '?')} ===\n{body}"


def _text_of(value: str | list[Any]) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(b.get("text", "") for b in value if isinstance(b, dict))


def _block_lines(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
        return
    for block in content or ():
        kind = block.get("type")
        if kind == "text":
            yield block.get("text", "")
        elif kind == "tool_use":
            yield f"→ {block.get('name')}({_arguments(block.get('input') or {})})  [{block.get('id')}]"
        elif kind == "tool_result":
            flag = " (error)" if block.get("is_error") else ""
            yield f"← result{flag} of {block.get('tool_use_id')}:\n{_clipped(_result_text(block.get('content')))}"
        elif kind in ("thinking", "redacted_thinking"):
            yield f"[{kind}: {len(block.get('thinking', '') or '')} characters]"
        else:
            yield f"[{kind} block]"


def _arguments(value: dict[str, Any]) -> str:
    return ", ".join(f"{k}={orjson.dumps(v).decode()}" for k, v in value.items())


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", f"[{b.get('type')} block]") for b in content or () if isinstance(b, dict))


def _clipped(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= RESULT_LINES:
        return text
    return "\n".join([*lines[:RESULT_LINES], f"… {len(lines) - RESULT_LINES} more lines"])
