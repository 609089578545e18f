"""Claude Code session JSONL (~/.claude/projects/<cwd>/<session>.jsonl) as an Anthropic conversation.

Mapping (FORMATS.md §2):
- `user` / `assistant` lines are the conversation. Assistant lines sharing `message.id` are one
  streamed API message and are folded back together, also when Claude Code interleaved the
  results of parallel calls between them; consecutive tool_result lines form one user message.
- `progress`, `file-history-snapshot`, `queue-operation`, `summary` and every `system` line but
  `compact_boundary` are bookkeeping: dropped, counted in meta["dropped_lines"] by type.
- A `compact_boundary` is kept as a position: the index of the message holding the next line (the
  `isCompactSummary` user line, kept as a user message) goes to meta["compact_boundaries"], and
  [message, block] to meta["compact_boundary_blocks"] (the summary can share its user message with
  the results of the last call before compaction).
- `isMeta` user lines are kept: they are what the model was sent (expanded slash commands and
  skills, `<system-reminder>` hook output, command caveats) — in some sessions the task itself.
  Counted in meta["meta_lines"].
- Sidechain (subagent) lines inline in a main session (1.0.x) are not its conversation: skipped,
  counted in meta["sidechain_lines"] with one warning. A file made only of sidechain lines is a
  subagent's own session (2.1.x `subagents/agent-*.jsonl`) and is imported whole.
- Malformed lines (bad JSON, not an object, no known type, a `message` that is not an object or has
  no content) are skipped with a warning naming the line, counted in meta["skipped_lines"].
- Thinking blocks are kept as they are; `toolUseResult` (a duplicate of the tool_result) is ignored.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from datetime import datetime
from typing import Any

from worker.compaction.formats.blocks import content_blocks
from worker.compaction.formats.documents import parse_lines
from worker.compaction.formats.imported import Imported
from worker.compaction.formats.shaping import Entry, shape
from worker.compaction.model import Role

BOOKKEEPING = ("progress", "file-history-snapshot", "queue-operation", "summary", "system")
CONVERSATION = ("user", "assistant")
SIDECHAIN_LINES_NAMED = 5


def recorded_model(lines: list[tuple[int, dict[str, Any]]]) -> str | None:
    """The model that wrote most of the conversation's assistant lines (None when none names one)."""
    models = Counter(
        m
        for _, v in lines
        if v.get("type") == "assistant"
        and isinstance(v.get("message"), dict)
        and isinstance(m := v["message"].get("model"), str)
        and m
        and not m.startswith("<")  # "<synthetic>": written by the harness, not a model
    )
    return models.most_common(1)[0][0] if models else None


def load(data: bytes) -> Imported:
    """Import a Claude Code session; malformed lines are skipped with a warning naming the line."""
    warnings: list[str] = []
    skipped = 0
    dropped: Counter[str] = Counter()
    lines: list[tuple[int, dict[str, Any]]] = []
    for number, value, error in parse_lines(data):
        problem = error or _line_problem(value)
        if problem:
            warnings.append(f"line {number}: {problem}; skipped")
            skipped += 1
        elif value["type"] in CONVERSATION or _is_boundary(value):
            lines.append((number, value))
        else:
            dropped[_kind(value)] += 1
    main_session = any(not v.get("isSidechain") for _, v in lines)
    sidechain = [n for n, v in lines if main_session and v.get("isSidechain")]
    if sidechain:
        named = ", ".join(map(str, sidechain[:SIDECHAIN_LINES_NAMED]))
        more = ", …" if len(sidechain) > SIDECHAIN_LINES_NAMED else ""
        warnings.append(
            f"lines {named}{more}: skipped {len(sidechain)} sidechain (subagent) lines; "
            "they are not part of the main conversation"
        )
    kept = [(n, v) for n, v in lines if not (main_session and v.get("isSidechain"))]
    entries = _entries(kept, warnings)
    skipped += len(kept) - len(entries) - sum(1 for _, v in kept if _is_boundary(v))
    sources: list[str] = []
    messages, boundaries = shape(entries, warnings, sources)
    meta = {
        "timestamps": _timestamps(kept, sources),
        "compact_boundaries": [i for i, _ in boundaries],
        "compact_boundary_blocks": [list(b) for b in boundaries],
        "skipped_lines": skipped,
        "dropped_lines": dict(sorted(dropped.items())),
        "sidechain_lines": len(sidechain),
        "meta_lines": sum(1 for _, v in kept if v.get("isMeta")),
        "model": recorded_model(kept),
    }
    return Imported("", messages, "claude_code", tuple(warnings), meta)


def _timestamps(lines: list[tuple[int, dict[str, Any]]], sources: list[str]) -> list[float | None]:
    """Per message, when it was complete (its last source line's time, POSIX seconds), if known."""
    times: dict[str, float] = {}
    for number, value in lines:
        stamp = value.get("timestamp")
        if isinstance(stamp, str):
            with contextlib.suppress(ValueError):
                times[f"line {number}"] = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return [times.get(where) for where in sources]


def _line_problem(value: Any) -> str | None:
    """Why a parsed line cannot be read as a session entry (None: it can)."""
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object"
    kind = value.get("type")
    if not isinstance(kind, str):
        return "an object without a 'type'"
    if kind not in CONVERSATION and kind not in BOOKKEEPING:
        return f"unknown line type {kind!r}"
    if kind in CONVERSATION and not isinstance(value.get("message"), dict):
        return f"'message' is a {type(value.get('message')).__name__}, not an object"
    return None


def _is_boundary(value: dict[str, Any]) -> bool:
    return value["type"] == "system" and value.get("subtype") == "compact_boundary"


def _kind(value: dict[str, Any]) -> str:
    subtype = value.get("subtype")
    return f"system:{subtype}" if value["type"] == "system" and isinstance(subtype, str) else value["type"]


def _entries(lines: list[tuple[int, dict[str, Any]]], warnings: list[str]) -> list[Entry]:
    entries = []
    boundary = False
    for number, value in lines:
        if _is_boundary(value):
            boundary = True
            continue
        message = value["message"]
        where = f"line {number}"
        if "content" not in message:
            warnings.append(f"{where}: the message has no content; skipped")
            continue
        role: Role = "assistant" if value["type"] == "assistant" else "user"
        group = message.get("id") if role == "assistant" and isinstance(message.get("id"), str) else None
        blocks = tuple(content_blocks(message["content"], where, warnings))
        entries.append(Entry(role, blocks, where, group=group, boundary=boundary))
        boundary = False
    return entries
