"""What a valid Anthropic Messages request is, as a list of problems (empty: valid).

Rules checked (the API's own, made strict where it merges silently):
- at least one message; the first is from the user; roles alternate user/assistant;
- every message has non-empty content; text blocks are non-empty strings;
- tool_use ids are unique; every tool_use in an assistant message is answered by exactly one
  tool_result in the very next (user) message, and that message answers nothing else;
- in a user message, tool_result blocks come before any other block.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def request_problems(request: dict[str, Any], *, allow_pending_tool_use: bool = False) -> list[str]:
    """Problems with a {system, messages} request; [] when it can be sent to messages.create."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty list"]
    problems: list[str] = []
    system = request.get("system", "")
    if not isinstance(system, str | list):
        problems.append("system must be a string or a list of text blocks")
    if messages[0].get("role") != "user":
        problems.append("messages[0] must be from the user")
    seen_ids: Counter[str] = Counter()
    for i, message in enumerate(messages):
        problems.extend(_message_problems(i, message))
        if i and message.get("role") == messages[i - 1].get("role"):
            problems.append(f"messages[{i}] has the same role as messages[{i - 1}]")
        for block in _blocks(message):
            if block.get("type") == "tool_use":
                seen_ids[str(block.get("id"))] += 1
    problems.extend(f"tool_use id {k} appears {n} times" for k, n in seen_ids.items() if n > 1)
    problems.extend(_pairing_problems(messages, allow_pending_tool_use))
    return problems


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _message_problems(i: int, message: Any) -> list[str]:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        return [f"messages[{i}] must have role 'user' or 'assistant'"]
    content = message.get("content")
    if isinstance(content, str):
        return [] if content else [f"messages[{i}] has empty content"]
    if not isinstance(content, list) or not content:
        return [f"messages[{i}] has empty content"]
    problems = []
    seen_other = False
    for j, block in enumerate(content):
        if not isinstance(block, dict):
            problems.append(f"messages[{i}].content[{j}] is not a block")
            continue
        kind = block.get("type")
        if kind == "text" and not (isinstance(block.get("text"), str) and block["text"].strip()):
            problems.append(f"messages[{i}].content[{j}] is an empty text block")
        if kind == "tool_result":
            if message["role"] != "user":
                problems.append(f"messages[{i}].content[{j}] tool_result outside a user message")
            if seen_other:
                problems.append(f"messages[{i}].content[{j}] tool_result after a non-result block")
        else:
            seen_other = True
        if kind == "tool_use" and message["role"] != "assistant":
            problems.append(f"messages[{i}].content[{j}] tool_use outside an assistant message")
    return problems


def _pairing_problems(messages: list[dict[str, Any]], allow_pending: bool) -> list[str]:
    problems = []
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        if message.get("role") == "user":
            answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            asked = set()
            if i and messages[i - 1].get("role") == "assistant":
                asked = {b.get("id") for b in _blocks(messages[i - 1]) if b.get("type") == "tool_use"}
            for tid in answered:
                if tid not in asked:
                    problems.append(
                        f"messages[{i}] answers tool_use {tid} that the previous message did not make"
                    )
            continue
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if not uses:
            continue
        if i + 1 >= len(messages):
            if not allow_pending:
                problems.append(f"messages[{i}] ends with tool_use {uses} that has no tool_result")
            continue
        results = Counter(
            b.get("tool_use_id") for b in _blocks(messages[i + 1]) if b.get("type") == "tool_result"
        )
        for tid in uses:
            if results[tid] != 1:
                problems.append(
                    f"tool_use {tid} in messages[{i}] has {results[tid]} tool_results in messages[{i + 1}]"
                )
    return problems


def pending_tool_use_ids(messages: list[dict[str, Any]]) -> list[str]:
    """tool_use ids in the last assistant message that no later message answers (a tool in flight)."""
    if not messages or messages[-1].get("role") != "assistant":
        return []
    return [b["id"] for b in _blocks(messages[-1]) if b.get("type") == "tool_use"]
