"""Transcript importers on every shared transcript: detection, validity, tool counts, streamed merges, thinking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import data_params, transcript_files
from worker.compaction.formats import detect_format, load_transcript
from worker.compaction.formats.shaping import NO_RESULT
from worker.compaction.validate import request_problems

FILES = transcript_files()
FORMAT_BY_FOLDER = {"claude-code": "claude_code", "swe-agent": "swe_agent", "openhands": "openhands"}

# (tool_use, recorded tool_result, is_error) per FORMATS.md §1, for the main conversation.
# 5c0375b4: the inventory's 21 calls / 3 errors include 8 calls / 1 error made in inline sidechain
# (subagent) lines, which are not part of the main conversation.
# edge_cases: 3 calls, 1 recorded result (the MultiEdit result sits under a misspelt `contenst` key).
# OpenHands: finish is assistant text, so basic.json has 1 call (3 events carry tool_call_metadata:
# edit, its observation, finish) and basic_gui_mode.json 4 (4 actions + 4 observations).
INVENTORY = {
    "fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl": (197, 197, 8),
    "agent-acompact-70d8e7.jsonl": (0, 0, 0),
    "agent-aa84377.jsonl": (21, 21, 0),
    "agent-a93ccab.jsonl": (25, 25, 0),
    "258c7280-ae70-4798-800f-63464d01a85d.jsonl": (186, 186, 7),
    "agent-acompact-fffbd0.jsonl": (0, 0, 0),
    "agent-a881341.jsonl": (2, 2, 0),
    "short.jsonl": (2, 2, 2),
    "tool_heavy.jsonl": (6, 6, 0),
    "subagent.jsonl": (16, 16, 0),
    "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl": (13, 13, 2),
    "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl": (12, 12, 1),
    "edge_cases.jsonl": (3, 1, 1),
    "representative_messages.jsonl": (2, 2, 0),
    "sample_session.jsonl": (2, 2, 0),
    "marshmallow-1867__function_calling_replace_from_source.traj": (13, 13, 0),
    "ctf_web_i_got_id_demo.traj": (0, 0, 0),
    "ctf_crypto_katy.traj": (0, 0, 0),
    "pydicom__pydicom-1458.traj": (0, 0, 0),
    "function_calling_simple.traj": (5, 5, 0),
    "basic.json": (1, 1, 0),
    "basic_gui_mode.json": (4, 4, 0),
}


def blocks(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [b for m in messages for b in m["content"] if b["type"] == kind]


def session_lines(path: Path) -> list[dict[str, Any]]:
    """The main-conversation user/assistant lines of a Claude Code file (sidechain lines only when all are)."""
    lines = []
    for raw in path.read_bytes().splitlines():
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if (
            isinstance(value, dict)
            and value.get("type") in ("user", "assistant")
            and isinstance(value.get("message"), dict)
        ):
            lines.append(value)
    main = [v for v in lines if not v.get("isSidechain")]
    return main or lines


@pytest.mark.data
@pytest.mark.parametrize("path", data_params(FILES), ids=lambda p: p.name[:40])
def test_shared_transcript_imports_as_a_valid_request(shared_data: Path, path: Path) -> None:
    """Each shared file is detected as its format and imports into a valid request with the inventory's tool counts."""
    data = path.read_bytes()
    expected_format = FORMAT_BY_FOLDER[path.relative_to(shared_data / "transcripts").parts[0]]
    assert detect_format(data) == expected_format
    imported = load_transcript(path)
    assert imported.format == expected_format
    assert request_problems({"system": imported.system, "messages": imported.messages}) == []
    results = [b for b in blocks(imported.messages, "tool_result") if b["content"] != NO_RESULT]
    counts = (
        len(blocks(imported.messages, "tool_use")),
        len(results),
        sum(b.get("is_error") is True for b in results),
    )
    assert counts == INVENTORY[path.name]


@pytest.mark.data
@pytest.mark.parametrize(
    "path", data_params([p for p in FILES if p.suffix == ".jsonl"]), ids=lambda p: p.name[:40]
)
def test_claude_code_streamed_lines_merge_into_api_messages(shared_data: Path, path: Path) -> None:
    """Each assistant message is one API message: as many assistant messages as distinct message ids."""
    lines = session_lines(path)
    ids = {v["message"].get("id") for v in lines if v["type"] == "assistant"}
    imported = load_transcript(path)
    assistants = [m for m in imported.messages if m["role"] == "assistant"]
    # sample_session.jsonl (older format) has no message ids: three turns, separated by user lines
    assert len(assistants) == (3 if path.name == "sample_session.jsonl" else len(ids))


@pytest.mark.data
@pytest.mark.parametrize(
    "path", data_params([p for p in FILES if p.suffix == ".jsonl"]), ids=lambda p: p.name[:40]
)
def test_claude_code_thinking_blocks_are_unchanged(shared_data: Path, path: Path) -> None:
    """Every thinking block of the main conversation is imported byte for byte, in order."""
    source = [
        orjson.dumps(b)
        for v in session_lines(path)
        if v["type"] == "assistant" and isinstance(v["message"].get("content"), list)
        for b in v["message"]["content"]
        if isinstance(b, dict) and b.get("type") == "thinking"
    ]
    imported = load_transcript(path)
    assert [orjson.dumps(b) for b in blocks(imported.messages, "thinking")] == source


@pytest.mark.data
def test_long_sessions_keep_their_compaction_boundary(shared_data: Path) -> None:
    """Both long sessions report one compaction boundary, at Claude Code's own summary, and 157/152 turns."""
    root = shared_data / "transcripts" / "claude-code" / "spotter"
    for name, assistants in (
        ("fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl", 157),
        ("258c7280-ae70-4798-800f-63464d01a85d.jsonl", 152),
    ):
        imported = load_transcript(root / name)
        [(i, j)] = imported.meta["compact_boundary_blocks"]
        assert imported.meta["compact_boundaries"] == [i]
        assert imported.messages[i]["content"][j]["text"].startswith("This session is being continued")
        assert sum(m["role"] == "assistant" for m in imported.messages) == assistants
        assert imported.meta["skipped_lines"] == 0


def test_every_inventoried_file_is_present_when_data_is() -> None:
    """Guard: when the shared data exists, every file the inventory names was found (and no unlisted one)."""
    if FILES:
        assert sorted(p.name for p in FILES) == sorted(INVENTORY)
