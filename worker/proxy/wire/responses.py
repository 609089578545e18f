"""The OpenAI Responses API (`POST /v1/responses`) and the canonical form.

Request -> canonical (`canonical_request`): the instructions and the leading run of `developer` /
`system` messages are the conversation's system prompt, sent upstream as the client sent them;
every later item becomes a block of a user or assistant turn, consecutive items of one side in one
turn:

| item | canonical block |
| --- | --- |
| `message`, role `user` | `text`, `image` (`input_image`), `document` (`input_file`) in a user turn |
| `message`, role `assistant` | `text` (`output_text`, `refusal`) in an assistant turn |
| `message`, role `developer` / `system` | a role-tagged `text` in a user turn (`tags`) |
| `reasoning` | `redacted_thinking` whose `data` is the item's JSON (`encrypted_content` byte for byte) |
| `function_call` / `custom_tool_call` | `tool_use` (`call_id` its id; arguments parsed, sent back compact) |
| `function_call_output` / `custom_tool_call_output` | `tool_result` |
| anything else (a hosted tool's call, a tool search) | an item-tagged `text` (`tags`), sent back as received |

Item ids and statuses are left out (they are not what the model reads); a reasoning item keeps its
id. Canonical -> request (`upstream_input`) is the inverse, so a stored turn is sent upstream as the
same items at every request: consecutive user messages reach the model as one message with their
parts in order, as the canonical form holds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from worker.proxy.wire import tags

SYSTEM_ROLES = ("developer", "system")
# the client's parameters compactd replaces or decides itself (never sent upstream as given)
REPLACED = ("input", "stream", "previous_response_id", "tools", "conversation")
RAW_ARGUMENTS = "_arguments"  # a tool_use input holding arguments that are not a JSON object
ENCRYPTED = "reasoning.encrypted_content"


class WireError(ValueError):
    """Raised when a request cannot be read in its format: the message says what and where."""


# -- request -> canonical ---------------------------------------------------------------------


def input_items(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list) or not all(isinstance(i, dict) for i in given):
        raise WireError("input: a string or a list of items is required")
    return given


def head_length(items: Sequence[dict[str, Any]]) -> int:
    """How many leading items are developer or system messages (the system prompt's part of input)."""
    n = 0
    while n < len(items) and _is_message(items[n]) and items[n].get("role") in SYSTEM_ROLES:
        n += 1
    return n


def system_text(body: Mapping[str, Any], head: Sequence[dict[str, Any]]) -> str:
    """The conversation's system prompt as text: the instructions, then the leading messages."""
    parts = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
    parts += [_message_text(m) for m in head]
    return "\n\n".join(p for p in parts if p)


def canonical_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical body the proxy use case takes: model, output budget, system text, messages."""
    items = input_items(body)
    head = head_length(items)
    out: dict[str, Any] = {
        "model": body.get("model"),
        "system": system_text(body, items[:head]),
        "messages": canonical_messages(items[head:]),
    }
    if isinstance(body.get("tools"), list) and body["tools"]:
        out["tools"] = body["tools"]  # whether it is a conversation at all (a lone question has none)
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and limit > 0:
        out["max_tokens"] = limit
    return out


def canonical_messages(items: Iterable[dict[str, Any]], where: str = "input") -> list[dict[str, Any]]:
    """Canonical user and assistant messages of `items`, consecutive blocks of one side merged."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        role, blocks = item_blocks(item, f"{where}[{i}]")
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": list(blocks)})
    return messages


def item_blocks(item: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    """The side ("user" / "assistant") an item belongs to and its canonical blocks."""
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return _message_blocks(item, where)
    if kind == "reasoning":
        # as the client sends it back: no status, no null or empty content (Codex sends null)
        kept = {k: v for k, v in item.items() if (v not in (None, []) and k != "status") or k == "summary"}
        data = orjson.dumps(kept, option=orjson.OPT_SORT_KEYS).decode()
        return "assistant", [{"type": "redacted_thinking", "data": data}]
    if kind in ("function_call", "custom_tool_call"):
        return "assistant", [tool_use(item, where)]
    if kind in ("function_call_output", "custom_tool_call_output"):
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise WireError(f"{where}.call_id: a string is required")
        return "user", [{"type": "tool_result", "tool_use_id": call_id, "content": _output(item, where)}]
    if kind == "item_reference":
        raise WireError(
            f"{where}: item_reference is not supported; send the items themselves, or use"
            " previous_response_id with a response compactd answered"
        )
    if not isinstance(kind, str):
        raise WireError(f"{where}.type: a string is required")
    # outputs come from the client (after a call), everything else from the model
    side = "user" if kind.endswith("_output") else "assistant"
    return side, [tags.item_block({k: v for k, v in item.items() if k != "id" or side == "assistant"})]


def tool_use(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise WireError(f"{where}: call_id and name are required")
    if item.get("type") == "custom_tool_call":
        return {
            "type": "tool_use",
            "id": call_id,
            "name": name,
            "input": {"input": str(item.get("input", ""))},
        }
    return {"type": "tool_use", "id": call_id, "name": name, "input": parse_arguments(item.get("arguments"))}


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """A function call's arguments as a tool_use input: the JSON object they hold, else the text
    itself under RAW_ARGUMENTS (sent back unchanged)."""
    if isinstance(arguments, str):
        try:
            parsed = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and RAW_ARGUMENTS not in parsed:
            return parsed
    return {RAW_ARGUMENTS: arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()}


def dump_arguments(input_: Any) -> str:
    if isinstance(input_, dict) and set(input_) == {RAW_ARGUMENTS} and isinstance(input_[RAW_ARGUMENTS], str):
        return input_[RAW_ARGUMENTS]
    return orjson.dumps(input_ if input_ is not None else {}).decode()


def _is_message(item: dict[str, Any]) -> bool:
    return item.get("type", "message") == "message" and "role" in item


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _message_blocks(item: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    role = item.get("role")
    if role not in ("user", "assistant", *SYSTEM_ROLES):
        raise WireError(f"{where}.role: one of user, assistant, developer, system")
    content = item.get("content")
    parts: Any = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    if not isinstance(parts, list):
        raise WireError(f"{where}.content: a string or a list of content parts is required")
    if role in SYSTEM_ROLES:
        return "user", [tags.role_block(role, _message_text(item))]
    side = "assistant" if role == "assistant" else "user"
    return side, [content_block(p, side, f"{where}.content[{j}]") for j, p in enumerate(parts)]


def content_block(part: Any, side: str, where: str) -> dict[str, Any]:
    """One content part as a canonical block."""
    if not isinstance(part, dict):
        raise WireError(f"{where}: a content part object is required")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return tags.text_block(side, str(part.get("text", "")))
    if kind == "refusal":
        return tags.text_block(side, str(part.get("refusal", "")))
    if kind == "input_image":
        return _with_detail(image_block(part, where), part)
    if kind == "input_file":
        return file_block(part, where)
    raise WireError(f"{where}.type {kind!r}: compactd takes input_text, input_image and input_file parts")


def image_block(part: dict[str, Any], where: str) -> dict[str, Any]:
    url, file_id = part.get("image_url"), part.get("file_id")
    if isinstance(file_id, str) and file_id:
        return {"type": "image", "source": {"type": "file", "file_id": file_id}}
    if not isinstance(url, str) or not url:
        raise WireError(f"{where}: image_url or file_id is required")
    return {"type": "image", "source": source_of(url)}


def file_block(part: dict[str, Any], where: str) -> dict[str, Any]:
    if isinstance(part.get("file_id"), str):
        source: dict[str, Any] = {"type": "file", "file_id": part["file_id"]}
    elif isinstance(part.get("file_data"), str):
        source = source_of(part["file_data"])
    elif isinstance(part.get("file_url"), str):
        source = {"type": "url", "url": part["file_url"]}
    else:
        raise WireError(f"{where}: file_id, file_data or file_url is required")
    block: dict[str, Any] = {"type": "document", "source": source}
    if isinstance(part.get("filename"), str):
        block["title"] = part["filename"]
    return block


def source_of(url: str) -> dict[str, Any]:
    """A data URL as a base64 source, any other URL as a url source."""
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "base64", "media_type": media, "data": data}
    return {"type": "url", "url": url}


def url_of(source: Mapping[str, Any]) -> str:
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
    return str(source.get("url", ""))


def _with_detail(block: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    # the detail the client asked for changes what the model sees: kept, and sent back
    return {**block, "detail": part["detail"]} if isinstance(part.get("detail"), str) else block


def _output(item: dict[str, Any], where: str) -> Any:
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return [content_block(p, "user", f"{where}.output[{j}]") for j, p in enumerate(output)]
    raise WireError(f"{where}.output: a string or a list of content parts is required")


# -- canonical -> upstream ----------------------------------------------------------------------


def tool_kinds(tools: Any) -> dict[str, str]:
    """Which call item each of the client's tools takes: custom tools answer with custom_tool_call."""
    out: dict[str, str] = {}
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool.get("type") == "custom":
            out[tool["name"]] = "custom"
    return out


def upstream_input(
    messages: Iterable[Mapping[str, Any]], kinds: Mapping[str, str], stored: bool = True
) -> list[dict[str, Any]]:
    """The Responses input items of canonical messages (the served prompt). With `stored` false
    (`store: false`), a reasoning item without its encrypted content is left out: the upstream
    kept nothing it could name."""
    out: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # call id -> the kind of its call
    for m in messages:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if m.get("role") == "assistant":
            out += _assistant_items(blocks, kinds, calls)
        else:
            out += _user_items(blocks, calls)
    if not stored:
        out = [i for i in out if i.get("type") != "reasoning" or i.get("encrypted_content")]
    return out


def _assistant_items(
    blocks: list[dict[str, Any]], kinds: Mapping[str, str], calls: dict[str, str]
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []

    def flush() -> None:
        if texts:
            items.append({"type": "message", "role": "assistant", "content": list(texts)})
            texts.clear()

    for b in blocks:
        kind = b.get("type")
        item = tags.read_item(b)
        if item is not None:
            flush()
            items.append(item)
        elif kind == "text":
            texts.append({"type": "output_text", "text": _untagged(b)})
        elif kind == "tool_use":
            flush()
            items.append(call_item(b, kinds))
            calls[str(b.get("id"))] = kinds.get(str(b.get("name")), "function")
        elif kind == "redacted_thinking":
            reasoning = _reasoning(b)
            if reasoning is not None:
                flush()
                items.append(reasoning)
        # an Anthropic thinking block (a session begun on the Messages API) has no Responses form
    flush()
    return items


def call_item(block: Mapping[str, Any], kinds: Mapping[str, str]) -> dict[str, Any]:
    name, call_id, given = str(block.get("name")), str(block.get("id")), block.get("input")
    if kinds.get(name) == "custom" and isinstance(given, dict):
        return {
            "type": "custom_tool_call",
            "call_id": call_id,
            "name": name,
            "input": str(given.get("input", "")),
        }
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": dump_arguments(given)}


def _user_items(blocks: list[dict[str, Any]], calls: Mapping[str, str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []

    def flush() -> None:
        if parts:
            items.append({"type": "message", "role": "user", "content": list(parts)})
            parts.clear()

    for b in blocks:
        kind = b.get("type")
        role, item = tags.read_role(b), tags.read_item(b)
        if item is not None:
            flush()
            items.append(item)
        elif role is not None and role[0] in SYSTEM_ROLES:
            flush()
            items.append(
                {"type": "message", "role": role[0], "content": [{"type": "input_text", "text": role[1]}]}
            )
        elif kind == "tool_result":
            flush()
            call_id = str(b.get("tool_use_id"))
            kind_out = "custom_tool_call_output" if calls.get(call_id) == "custom" else "function_call_output"
            items.append({"type": kind_out, "call_id": call_id, "output": output_of(b.get("content"))})
        else:
            part = input_part(b)
            if part is not None:
                parts.append(part)
    flush()
    return items


def input_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """A canonical block as a Responses input content part (None: nothing the format can carry)."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "input_text", "text": _untagged(block)}
    if kind == "image":
        source = block.get("source") or {}
        part: dict[str, Any] = (
            {"type": "input_image", "file_id": source.get("file_id")}
            if source.get("type") == "file"
            else {"type": "input_image", "image_url": url_of(source)}
        )
        return {**part, "detail": block["detail"]} if "detail" in block else part
    if kind == "document":
        source = block.get("source") or {}
        if source.get("type") == "file":
            part = {"type": "input_file", "file_id": source.get("file_id")}
        elif source.get("type") == "url":
            part = {"type": "input_file", "file_url": source.get("url")}
        else:
            part = {"type": "input_file", "file_data": url_of(source)}
        return {**part, "filename": block["title"]} if "title" in block else part
    return None


def output_of(content: Any) -> Any:
    """A tool_result's content as a function_call_output's output: a string, or content parts."""
    if isinstance(content, str) or content is None:
        return content or ""
    parts = [input_part(b) for b in content if isinstance(b, dict)]
    kept = [p for p in parts if p is not None]
    if all(p["type"] == "input_text" for p in kept) and len(kept) <= 1:
        return kept[0]["text"] if kept else ""
    return kept


def _untagged(block: Mapping[str, Any]) -> str:
    """A text block's text, a client text that was wrapped in its own role tag unwrapped."""
    role = tags.read_role(dict(block))
    if role is not None and role[0] in ("user", "assistant"):
        return role[1]
    return str(block.get("text", ""))


def _reasoning(block: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        item = orjson.loads(str(block.get("data", "")))
    except orjson.JSONDecodeError:
        return None
    return item if isinstance(item, dict) and item.get("type") == "reasoning" else None


def function_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """One of compactd's tools (Messages API shape) as a Responses function tool."""
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("input_schema", {"type": "object"}),
        "strict": False,
    }


def upstream_body(
    client: Mapping[str, Any],
    served_messages: Sequence[Mapping[str, Any]],
    memory: str,
    compactd_tools: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], frozenset[str]]:
    """The upstream request (always streamed) and the tool names compactd answers itself: the
    client's parameters, its instructions and leading developer messages as sent, compactd's
    working-memory block as a developer message after them, then the served conversation; the
    client's tools then compactd's (unless the client has one of the same name)."""
    items = input_items(client)
    head = items[: head_length(items)]
    body = {k: v for k, v in client.items() if k not in REPLACED}
    memory_items = (
        [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": memory}]}]
        if memory
        else []
    )
    tools = [t for t in client.get("tools") or [] if isinstance(t, dict)]
    taken = {t.get("name") for t in tools}
    added = [function_tool(t) for t in compactd_tools if t["name"] not in taken]
    if tools or added:
        body["tools"] = tools + added
    body["stream"] = True
    stored = client.get("store") is not False
    if not stored and isinstance(client.get("reasoning"), dict):
        # reasoning sent back without the upstream keeping it needs its encrypted content
        include = [i for i in client.get("include") or [] if isinstance(i, str)]
        body["include"] = include if ENCRYPTED in include else [*include, ENCRYPTED]
    body["input"] = [*head, *memory_items, *upstream_input(served_messages, tool_kinds(tools), stored)]
    return body, frozenset(t["name"] for t in added)
