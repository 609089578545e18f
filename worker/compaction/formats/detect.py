"""Detect: which transcript format some bytes are, from their structure (never their text)."""

from __future__ import annotations

from typing import Any

import orjson

from worker.compaction.errors import UnknownFormat
from worker.compaction.formats.documents import BOM, read_lines

FORMATS = ("anthropic", "openai", "claude_code", "swe_agent", "openhands", "langchain")
CLAUDE_CODE_TYPES = (
    "user",
    "assistant",
    "progress",
    "file-history-snapshot",
    "queue-operation",
    "summary",
    "system",
)
CLAUDE_CODE_KEYS = {"message", "uuid", "parentUuid", "sessionId", "leafUuid", "isSidechain"}
LANGCHAIN_TYPES = ("human", "ai", "tool", "system", "chat", "function", "AIMessageChunk")
OPENAI_ROLES = ("system", "developer", "tool", "function")
OPENAI_PARTS = ("image_url", "input_audio", "refusal", "file")
SUPPORTED = (
    "supported: Anthropic messages ({system, messages} or a list), OpenAI chat messages, LangChain "
    "message dicts, Claude Code session JSONL, SWE-agent .traj, OpenHands event lists"
)


def detect_format(data: bytes) -> str:
    """The format name of a transcript; raises UnknownFormat saying what was seen and what is supported."""
    body = data.removeprefix(BOM).strip()
    if not body:
        raise UnknownFormat(f"the input is empty; {SUPPORTED}")
    if _first_line_ends_a_value(body):
        return _detect_lines(body)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _detect_lines(body)
    return _detect_document(doc)


def _first_line_ends_a_value(body: bytes) -> bool:
    """Whether the first line of body (stripped, so something follows it) is a JSON value by itself:
    then body is JSON Lines and no one JSON document, since a value that ends may be followed by
    white space only. A JSON Lines file is then not parsed whole just to fail."""
    end = body.find(b"\n")
    if end < 0:
        return False
    try:
        orjson.loads(body[:end])
    except orjson.JSONDecodeError:
        return False
    return True


def _detect_document(doc: Any) -> str:
    if isinstance(doc, dict):
        if isinstance(doc.get("history"), list):
            return "swe_agent"
        if _is_claude_code_line(doc):
            return "claude_code"
        if isinstance(doc.get("events"), list) and _is_openhands(doc["events"]):
            return "openhands"
        if isinstance(doc.get("messages"), list):
            return classify_messages(doc["messages"])
        raise UnknownFormat(f"a JSON object with keys {sorted(doc)[:12]} is no known transcript; {SUPPORTED}")
    if isinstance(doc, list):
        if _is_openhands(doc):
            return "openhands"
        return classify_messages(doc)
    raise UnknownFormat(f"a JSON {type(doc).__name__} is no transcript; {SUPPORTED}")


def _detect_lines(body: bytes) -> str:
    objects = 0
    for _, value, _error in read_lines(body):
        if isinstance(value, dict):
            objects += 1
            if _is_claude_code_line(value):
                return "claude_code"
    what = (
        f"{objects} JSON object lines, none a Claude Code session entry"
        if objects
        else "no JSON document or JSON lines"
    )
    raise UnknownFormat(f"found {what}; {SUPPORTED}")


def _is_claude_code_line(value: dict[str, Any]) -> bool:
    return value.get("type") in CLAUDE_CODE_TYPES and not CLAUDE_CODE_KEYS.isdisjoint(value)


def _is_openhands(events: list[Any]) -> bool:
    return any(
        isinstance(e, dict)
        and e.get("source") in ("user", "agent", "environment")
        and ("action" in e or "observation" in e)
        for e in events
    )


def classify_messages(items: list[Any]) -> str:
    """anthropic, openai or langchain for a list of message dicts, by the markers each format alone has."""
    messages = [m for m in items if isinstance(m, dict)]
    if any(_langchain_marker(m) for m in messages):
        return "langchain"
    if any(_openai_marker(m) for m in messages):
        return "openai"
    if any(m.get("role") in ("user", "assistant") for m in messages):
        return "anthropic"
    raise UnknownFormat(f"a list of {len(items)} items that are not chat messages; {SUPPORTED}")


def _langchain_marker(m: dict[str, Any]) -> bool:
    if m.get("lc") is not None or m.get("role") in ("human", "ai"):
        return True
    if m.get("type") in LANGCHAIN_TYPES and "role" not in m:
        return True
    calls = m.get("tool_calls")
    return isinstance(calls, list) and any(isinstance(c, dict) and "args" in c for c in calls)


def _openai_marker(m: dict[str, Any]) -> bool:
    if m.get("role") in OPENAI_ROLES or "tool_calls" in m or "function_call" in m or "tool_call_id" in m:
        return True
    content = m.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in OPENAI_PARTS for p in content
    )
