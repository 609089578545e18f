"""Normalize incoming Anthropic messages into blocks that form a valid request, or say what is wrong.

Agents append assistant messages exactly as the Messages API returned them (the SDK's
`reply.model_dump()["content"]`). A response is not always a valid request: it can hold
whitespace-only text, keys set to None and SDK field names. Those are repaired here, at ingest, so
every stored turn can be sent back; only what cannot be repaired (an unknown block type, a malformed
block) raises. Tool pairing is checked by validate.py, on the repaired blocks.
"""

from __future__ import annotations

from typing import Any

from worker.compaction.errors import InvalidTranscript
from worker.compaction.model import Block

# Block types only a request carries (a response never holds them at the top level).
REQUEST_BLOCKS = frozenset({"image", "document", "search_result", "tool_result"})
# Every block type a response can hold: the installed anthropic SDK's ContentBlock and
# BetaContentBlock unions. tests/unit/test_normalize.py fails when the SDK adds one.
RESPONSE_BLOCKS = frozenset(
    {
        "text",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "container_upload",
        "mcp_tool_use",
        "mcp_tool_result",
        "mcp_tool_listing",
        "advisor_tool_result",
        "compaction",
        "fallback",
    }
)
KNOWN_BLOCKS = REQUEST_BLOCKS | RESPONSE_BLOCKS
# The API verifies these against their signature / encrypted data: they go back exactly as received.
SIGNED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
# A citation location requires these keys even when null (Required[Optional[str]] in the SDK's
# request params), so there a None is a value, not a response-only field left unset.
NULLABLE_CITATION_KEYS = frozenset({"document_title", "title"})
# Stands in for a message whose every block was blank (see normalize_message).
EMPTY_TEXT = "(empty)"


def normalize_message(message: Any, where: str = "message") -> tuple[str, tuple[Block, ...]]:
    """(role, blocks) of one message, ready to send back; string content becomes one text block.

    Raises InvalidTranscript naming `where` when the message cannot be repaired.
    """
    if not isinstance(message, dict):
        raise InvalidTranscript(f"{where} must be an object with 'role' and 'content'")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise InvalidTranscript(f"{where}.role must be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        content = [content]
    if not isinstance(content, list):
        raise InvalidTranscript(f"{where}.content must be a string or a list of content blocks")
    blocks = [_normalize_block(b, f"{where}.content[{i}]") for i, b in enumerate(content)]
    kept = tuple(b for b in blocks if not is_blank_text(b))
    # The API rejects a message with no content, but dropping the message would put two messages of
    # one role side by side (merged silently later) and lose the turn the agent counted. A visible
    # placeholder keeps the conversation's shape; it is what the model said: nothing (an API reply
    # can even come back with content []).
    return role, kept or ({"type": "text", "text": EMPTY_TEXT},)


def is_blank_text(block: Block) -> bool:
    """True for a text block with no visible text: the API rejects those in requests."""
    return block.get("type") == "text" and not str(block.get("text", "")).strip()


def drop_nones(value: Any, key: str = "") -> Any:
    """`value` without None-valued keys at any depth; `key` is the key `value` was found under.

    model_dump() writes every unset optional field as None, and the request side rejects some of
    those (`citations: null` on text). Citation entries keep their required nullable keys.
    """
    if isinstance(value, list):
        return [drop_nones(v, key) for v in value]
    if isinstance(value, dict):
        nullable = NULLABLE_CITATION_KEYS if key == "citations" else frozenset()
        return {k: drop_nones(v, k) for k, v in value.items() if v is not None or k in nullable}
    return value


def request_block(block: Block) -> Block:
    """A response block as a request takes it: None-valued keys dropped, wire names restored.

    Signed blocks come back unchanged. A tool call's `input` keeps its nulls: an argument is data.
    """
    if block["type"] in SIGNED_BLOCKS:
        return dict(block)
    out = {k: v if k == "input" else drop_nones(v, k) for k, v in block.items() if v is not None}
    # model_dump() without by_alias writes the Python name of the `from` field.
    if block["type"] == "fallback" and "from_" in out and "from" not in out:
        out["from"] = out.pop("from_")
    return out


def _normalize_block(block: Any, where: str) -> Block:
    if isinstance(block, str):
        return {"type": "text", "text": block}
    # checked after cleaning: a key set to None counts as absent, as model_dump() means it
    out = request_block(_typed(block, where))
    _check_fields(out, where)
    if out["type"] == "tool_use":
        return {**out, "input": out.get("input", {})}
    if out["type"] == "tool_result" and isinstance(out.get("content"), list):
        parts = [_normalize_block(p, f"{where}.content[{i}]") for i, p in enumerate(out["content"])]
        # a tool_result may have no content, so blank parts simply go
        return {**out, "content": [p for p in parts if not is_blank_text(p)]}
    return out


def _typed(block: Any, where: str) -> Block:
    """`block` if it is an object of a known block type; else InvalidTranscript."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidTranscript(f"{where} must be an object with a 'type'")
    if block["type"] not in KNOWN_BLOCKS:
        raise InvalidTranscript(
            f"{where}.type {block['type']!r} is not a known content block type"
            f" (known: {', '.join(sorted(KNOWN_BLOCKS))})"
        )
    return block


def _check_fields(block: Block, where: str) -> None:
    """Raise InvalidTranscript if `block` lacks a field its type needs."""
    kind = block["type"]
    if kind == "text" and not isinstance(block.get("text"), str):
        raise InvalidTranscript(f"{where}.text must be a string")
    if kind == "tool_use":
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise InvalidTranscript(f"{where} (tool_use) needs string 'id' and 'name'")
        if not isinstance(block.get("input", {}), dict):
            raise InvalidTranscript(f"{where}.input must be an object")
    if kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            raise InvalidTranscript(f"{where} (tool_result) needs a string 'tool_use_id'")
        if not isinstance(block.get("content", ""), str | list):
            raise InvalidTranscript(f"{where}.content must be a string or a list of blocks")
