"""Real transcripts as Anthropic messages: the engine's importer when present, else a small Claude Code reader.

Where the shared data is absent (a fresh clone), the Claude Code sessions are generated ones
(tests/synthetic.py), so the tests that need a long realistic session still run; under CI=true
they are not: the shared data is required there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.conftest import IN_CI, REPO, data_dir
from tests.synthetic import generated_dir
from worker.compaction.assemble import merge_roles

_KEEP = {"text", "tool_use", "tool_result"}


GENERATED = REPO / ".pytest_cache" / "generated-data"


def claude_code_files(generated: bool = True) -> list[Path]:
    """The shared data's Claude Code sessions (sub-agents' aside), smallest first; without the
    shared data, generated ones (never under CI=true, where the shared data is required, nor
    when `generated` is False)."""
    root = data_dir() / "transcripts" / "claude-code"
    if not root.is_dir():
        if IN_CI or not generated:
            return []
        root = generated_dir(GENERATED)
    return sorted(
        (p for p in root.rglob("*.jsonl") if "subagents" not in p.parts), key=lambda p: p.stat().st_size
    )


def load_messages(path: Path) -> list[dict[str, Any]]:
    """A valid, alternating Anthropic conversation from a transcript file."""
    try:
        from worker.compaction.formats import load_transcript  # type: ignore[attr-defined]

        return _valid(list(load_transcript(path).messages))
    except ImportError:
        pass
    raw = []
    for line in path.read_bytes().splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        message = event.get("message")
        if event.get("type") not in ("user", "assistant") or not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            continue
        blocks = [_clean(b) for b in content if isinstance(b, dict) and b.get("type") in _KEEP]
        blocks = [b for b in blocks if b is not None]
        if blocks:
            raw.append({"role": message.get("role", event["type"]), "content": blocks})
    return _valid(raw)


def _clean(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": block["text"]} if str(block.get("text", "")).strip() else None
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": block["id"],
            "name": block["name"],
            "input": block.get("input") or {},
        }
    content = block.get("content", "")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict)) or "(empty)"
    out = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": content or "(empty)"}
    if block.get("is_error"):
        out["is_error"] = True
    return out


def _valid(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge roles, then drop unanswered tool_uses and orphan tool_results, so every prefix is valid."""
    merged = merge_roles(messages)
    while merged and merged[0]["role"] != "user":
        merged.pop(0)
    out: list[dict[str, Any]] = []
    for i, m in enumerate(merged):
        blocks = list(m["content"])
        if m["role"] == "assistant":
            answered = set()
            if i + 1 < len(merged):
                answered = {
                    b.get("tool_use_id") for b in merged[i + 1]["content"] if b.get("type") == "tool_result"
                }
            blocks = [b for b in blocks if b.get("type") != "tool_use" or b["id"] in answered]
        else:
            asked = set()
            if out and out[-1]["role"] == "assistant":
                asked = {b["id"] for b in out[-1]["content"] if b.get("type") == "tool_use"}
            seen: set[str] = set()
            kept = []
            for b in blocks:
                if b.get("type") == "tool_result":
                    if b["tool_use_id"] not in asked or b["tool_use_id"] in seen:
                        continue
                    seen.add(b["tool_use_id"])
                kept.append(b)
            blocks = kept
        if not blocks:
            blocks = [{"type": "text", "text": "(no content)"}]
        out.append({"role": m["role"], "content": blocks})
    return merge_roles(out)
