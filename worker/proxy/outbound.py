"""The upstream request: compactd's served prompt with the client's system, tools and parameters.

Messages are the ready compacted prompt exactly as GET /prompt serves it (redacted, with its
cache breakpoints; memory changes ride in the user turns as `<compactd-memory>` notes). The system prompt is the client's own blocks followed by
compactd's working-memory block; tools are the client's followed by compactd's (unless the client
has a tool of the same name). Every other parameter (model, max_tokens, temperature, thinking,
tool_choice, stop_sequences, metadata, context_management, ...) passes through unchanged. At most
four cache_control breakpoints in total: the client's own on tools and system are replaced by one at
the end of the system prompt (it covers tools and system, which the provider caches first).
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}
_MEMORY_PREFIX = "<working_memory>"
# the client's parameters compactd replaces or decides itself
_REPLACED = ("messages", "system", "tools", "stream")


def client_system_blocks(system: Any) -> list[dict[str, Any]]:
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    if isinstance(system, list):
        return [dict(b) for b in system if isinstance(b, dict)]
    return []


def _without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def upstream_system(client_system: Any, served_system: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client's system blocks, then compactd's working memory; one breakpoint at the end, with
    the client's own cache_control (a ttl it chose) when it set one."""
    blocks = client_system_blocks(client_system)
    chosen = next((b["cache_control"] for b in reversed(blocks) if "cache_control" in b), EPHEMERAL)
    memory = [b for b in served_system if str(b.get("text", "")).startswith(_MEMORY_PREFIX)]
    out = [_without_cache_control(b) for b in blocks + memory]
    if out:
        out[-1] = {**out[-1], "cache_control": chosen}
    return out


def upstream_tools(
    client_tools: Any, compactd_tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], frozenset[str]]:
    """The client's tools then compactd's, and the names compactd answers itself (the ones added)."""
    tools = (
        [_without_cache_control(t) for t in client_tools if isinstance(t, dict)]
        if isinstance(client_tools, list)
        else []
    )
    taken = {t.get("name") for t in tools}
    added = [t for t in compactd_tools if t["name"] not in taken]
    return tools + added, frozenset(t["name"] for t in added)


def build_upstream(
    client_body: dict[str, Any], served: dict[str, Any], compactd_tools: list[dict[str, Any]]
) -> tuple[dict[str, Any], frozenset[str]]:
    """The request body to send upstream (always streamed) and the tool names compactd answers."""
    body = {k: v for k, v in client_body.items() if k not in _REPLACED}
    tools, hidden = upstream_tools(client_body.get("tools"), compactd_tools)
    system = upstream_system(client_body.get("system"), served.get("system") or [])
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    body["stream"] = True
    body["messages"] = served["messages"]
    return limit_breakpoints(body), hidden


def breakpoints(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where the request's cache_control marks are: (part, index, block index), in the provider's
    caching order (tools, system, messages)."""
    found: list[tuple[str, int, int]] = []
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and "cache_control" in tool:
            found.append(("tools", i, -1))
    system = body.get("system")
    if isinstance(system, list):
        found += [
            ("system", i, -1) for i, b in enumerate(system) if isinstance(b, dict) and "cache_control" in b
        ]
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            found += [
                ("messages", i, j)
                for j, b in enumerate(content)
                if isinstance(b, dict) and (("cache_control" in b) or _nested_mark(b))
            ]
    return found


def _nested_mark(block: dict[str, Any]) -> bool:
    content = block.get("content")
    return isinstance(content, list) and any(isinstance(p, dict) and "cache_control" in p for p in content)


def limit_breakpoints(body: dict[str, Any], limit: int = MAX_BREAKPOINTS) -> dict[str, Any]:
    """The body with at most `limit` breakpoints: the earliest message marks go first (the system's
    and the newest message's are the ones the next request reads)."""
    marks = breakpoints(body)
    excess = len(marks) - limit
    if excess <= 0:
        return body
    drop = [m for m in marks if m[0] == "messages"][:excess]
    messages = list(body["messages"])
    for _, i, j in drop:
        content = list(messages[i]["content"])
        block = _without_cache_control(content[j])
        if _nested_mark(block):
            block["content"] = [
                _without_cache_control(p) if isinstance(p, dict) else p for p in block["content"]
            ]
        content[j] = block
        messages[i] = {**messages[i], "content": content}
    return {**body, "messages": messages}


_SYSTEM_KEY = b',"system":'
_MESSAGES_KEY = b',"messages":'
# a key, never the inside of a JSON string (a quote in a string is escaped)
_MARK = b'"cache_control":'


def split_served(served_body: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The served prompt's system blocks (parsed: small) and its messages array as the stored JSON
    bytes (not parsed: the bulk of the prompt). GET /prompt's body ends with the messages."""
    start = served_body.index(_SYSTEM_KEY) + len(_SYSTEM_KEY)
    cut = served_body.index(_MESSAGES_KEY, start)
    return orjson.loads(served_body[start:cut]), served_body[cut + len(_MESSAGES_KEY) : -1]


def upstream_bytes(
    client_body: dict[str, Any], served_body: bytes, compactd_tools: list[dict[str, Any]]
) -> tuple[bytes, frozenset[str]]:
    """build_upstream's request as JSON bytes, the served messages spliced in unparsed: the cost
    follows the client's parameters, not the history (the equivalence is tested)."""
    system, messages = split_served(served_body)
    head, hidden = build_upstream(client_body, {"system": system, "messages": []}, compactd_tools)
    del head["messages"]
    head_bytes = orjson.dumps(head)
    body = head_bytes[:-1] + _MESSAGES_KEY + messages + b"}"
    if head_bytes.count(_MARK) + messages.count(_MARK) > MAX_BREAKPOINTS:
        return orjson.dumps(limit_breakpoints(orjson.loads(body))), hidden
    return body, hidden
