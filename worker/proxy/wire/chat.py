"""The OpenAI Chat Completions API (`POST /v1/chat/completions`) and the canonical form.

Request -> canonical (`canonical_request`): the leading `system` / `developer` messages are the
conversation's system prompt, sent upstream as the client sent them; later messages map onto
user and assistant turns:

| message | canonical |
| --- | --- |
| `user` (string or `text` / `image_url` / `file` parts) | `text`, `image`, `document` blocks |
| `assistant` | `text`, one `tool_use` per `tool_calls` entry (a server's `reasoning_content` is relayed, not kept) |
| `tool` | `tool_result` (its `tool_call_id`) in a user turn |
| `system` / `developer` later on | a role-tagged `text` in a user turn (`tags`) |

Canonical -> request (`upstream_messages`) is the inverse; a turn of one text block is sent with
string content, as clients send it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from worker.proxy.wire import tags
from worker.proxy.wire.responses import WireError, dump_arguments, parse_arguments, source_of, url_of

SYSTEM_ROLES = ("developer", "system")
REPLACED = ("messages", "stream", "stream_options", "tools", "n")


def messages_of(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    given = body.get("messages")
    if not isinstance(given, list) or not given or not all(isinstance(m, dict) for m in given):
        raise WireError("messages: a non-empty list of message objects is required")
    n = body.get("n")
    if n not in (None, 1):
        raise WireError("n: compactd answers with one choice (n = 1)")
    return given


def head_length(messages: Sequence[dict[str, Any]]) -> int:
    n = 0
    while n < len(messages) and messages[n].get("role") in SYSTEM_ROLES:
        n += 1
    return n


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def canonical_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical body the proxy use case takes: model, output budget, system text, messages."""
    messages = messages_of(body)
    head = head_length(messages)
    out: dict[str, Any] = {
        "model": body.get("model"),
        "system": "\n\n".join(t for t in (text_of(m.get("content")) for m in messages[:head]) if t),
        "messages": canonical_messages(messages[head:]),
    }
    if isinstance(body.get("tools"), list) and body["tools"]:
        out["tools"] = body["tools"]  # whether it is a conversation at all (a lone question has none)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(limit, int) and limit > 0:
        out["max_tokens"] = limit
    return out


def canonical_messages(messages: Iterable[dict[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages, start):
        side, blocks = message_blocks(m, f"messages[{i}]")
        if out and out[-1]["role"] == side:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": side, "content": list(blocks)})
    return out


def message_blocks(m: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    role = m.get("role")
    if role in SYSTEM_ROLES:
        return "user", [tags.role_block(role, text_of(m.get("content")))]
    if role == "user":
        return "user", user_blocks(m.get("content"), f"{where}.content")
    if role == "tool":
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise WireError(f"{where}.tool_call_id: a string is required")
        content = m.get("content")
        result = content if isinstance(content, str) else user_blocks(content, f"{where}.content")
        return "user", [{"type": "tool_result", "tool_use_id": call_id, "content": result}]
    if role == "assistant":
        return "assistant", assistant_blocks(m, where)
    raise WireError(f"{where}.role: one of system, developer, user, assistant, tool")


def user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [tags.text_block("user", content)]
    if not isinstance(content, list):
        raise WireError(f"{where}: a string or a list of content parts is required")
    return [_part_block(p, f"{where}[{j}]") for j, p in enumerate(content)]


def _part_block(part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return tags.text_block("user", str(part.get("text", "")))
    if kind == "image_url":
        spec = part.get("image_url")
        url = spec.get("url") if isinstance(spec, dict) else spec
        if not isinstance(url, str) or not url:
            raise WireError(f"{where}.image_url.url: a string is required")
        block: dict[str, Any] = {"type": "image", "source": source_of(url)}
        if isinstance(spec, dict) and isinstance(spec.get("detail"), str):
            block["detail"] = spec["detail"]
        return block
    if kind == "file":
        spec = part.get("file") if isinstance(part.get("file"), dict) else {}
        if isinstance(spec.get("file_id"), str):
            source: dict[str, Any] = {"type": "file", "file_id": spec["file_id"]}
        elif isinstance(spec.get("file_data"), str):
            source = source_of(spec["file_data"])
        else:
            raise WireError(f"{where}.file: file_id or file_data is required")
        doc: dict[str, Any] = {"type": "document", "source": source}
        return {**doc, "title": spec["filename"]} if isinstance(spec.get("filename"), str) else doc
    raise WireError(f"{where}.type {kind!r}: compactd takes text, image_url and file parts")


def assistant_blocks(m: dict[str, Any], where: str) -> list[dict[str, Any]]:
    # an OpenAI-compatible server's `reasoning_content` is relayed, never kept: clients mostly leave
    # it out of the history they send back, and some servers refuse it in a request
    blocks: list[dict[str, Any]] = []
    content = m.get("content")
    if isinstance(content, str) and content:
        blocks.append(tags.text_block("assistant", content))
    elif isinstance(content, list):
        blocks += [
            tags.text_block("assistant", str(p.get("text", p.get("refusal", ""))))
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "refusal")
        ]
    if isinstance(m.get("refusal"), str) and m["refusal"] and not content:
        blocks.append(tags.text_block("assistant", m["refusal"]))
    for j, call in enumerate(m.get("tool_calls") or []):
        fn = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(fn, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(fn.get("name"), str)
        ):
            raise WireError(f"{where}.tool_calls[{j}]: id and function.name are required")
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": fn["name"],
                "input": parse_arguments(fn.get("arguments")),
            }
        )
    return blocks


# -- canonical -> upstream ----------------------------------------------------------------------


def upstream_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if m.get("role") == "assistant":
            out.append(assistant_message(blocks))
        else:
            out += user_messages(blocks)
    return out


def assistant_message(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    texts = [_untagged(b) for b in blocks if b.get("type") == "text"]
    calls = [
        {
            "id": str(b.get("id")),
            "type": "function",
            "function": {"name": str(b.get("name")), "arguments": dump_arguments(b.get("input"))},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    out: dict[str, Any] = {"role": "assistant"}
    out["content"] = _content(texts) if texts else None
    if calls:
        out["tool_calls"] = calls
    return out


def _content(texts: list[str]) -> str | list[dict[str, Any]]:
    return texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]


def user_messages(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []

    def flush() -> None:
        if parts:
            only_text = len(parts) == 1 and parts[0]["type"] == "text"
            out.append({"role": "user", "content": parts[0]["text"] if only_text else list(parts)})
            parts.clear()

    for b in blocks:
        role = tags.read_role(b)
        if role is not None and role[0] in SYSTEM_ROLES:
            flush()
            out.append({"role": role[0], "content": role[1]})
        elif b.get("type") == "tool_result":
            flush()
            out.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id")), "content": _result(b)})
        else:
            part = _part(b)
            if part is not None:
                parts.append(part)
    flush()
    return out


def _result(block: Mapping[str, Any]) -> Any:
    content = block.get("content")
    if isinstance(content, str) or content is None:
        return content or ""
    parts = [p for p in (_part(b) for b in content if isinstance(b, dict)) if p is not None]
    if all(p["type"] == "text" for p in parts) and len(parts) <= 1:
        return parts[0]["text"] if parts else ""
    return parts


def _part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _untagged(block)}
    if kind == "image":
        spec: dict[str, Any] = {"url": url_of(block.get("source") or {})}
        if "detail" in block:
            spec["detail"] = block["detail"]
        return {"type": "image_url", "image_url": spec}
    if kind == "document":
        source = block.get("source") or {}
        file: dict[str, Any] = (
            {"file_id": source.get("file_id")}
            if source.get("type") == "file"
            else {"file_data": url_of(source)}
        )
        if "title" in block:
            file["filename"] = block["title"]
        return {"type": "file", "file": file}
    return None


def _untagged(block: Mapping[str, Any]) -> str:
    role = tags.read_role(dict(block))
    if role is not None and role[0] in ("user", "assistant"):
        return role[1]
    return str(block.get("text", ""))


def function_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """One of compactd's tools (Messages API shape) as a Chat Completions function tool."""
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("input_schema", {"type": "object"}),
        },
    }


def tool_name(tool: Any) -> Any:
    fn = tool.get("function") if isinstance(tool, dict) else None
    return fn.get("name") if isinstance(fn, dict) else None


def upstream_body(
    client: Mapping[str, Any],
    served_messages: Sequence[Mapping[str, Any]],
    memory: str,
    compactd_tools: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], frozenset[str]]:
    """The upstream request (always streamed, with usage) and the tool names compactd answers: the
    client's parameters, its leading system messages as sent, compactd's working memory as a
    system message after them, then the served conversation; the client's tools then compactd's."""
    messages = messages_of(client)
    head = messages[: head_length(messages)]
    body = {k: v for k, v in client.items() if k not in REPLACED}
    memory_messages = [{"role": "system", "content": memory}] if memory else []
    tools = [t for t in client.get("tools") or [] if isinstance(t, dict)]
    taken = {tool_name(t) for t in tools}
    added = [function_tool(t) for t in compactd_tools if t["name"] not in taken]
    if tools or added:
        body["tools"] = tools + added
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    body["messages"] = [*head, *memory_messages, *upstream_messages(served_messages)]
    return body, frozenset(tool_name(t) for t in added)
